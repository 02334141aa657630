"""Hogwild (Recht et al. 2011, "HOGWILD!: A Lock-Free Approach to Parallelizing Stochastic Gradient Descent").

N worker processes on one machine share ONE copy of the parameters in shared memory; each computes gradients on its
own part of the data (Lightning's DistributedSampler) and applies its own optimizer step straight into the shared
weights, lock-free and without waiting for the others. Optimizer state (momentum, Adam moments) stays per worker.
PyTorch's own `examples/mnist_hogwild` does this with `share_memory()` and `torch.multiprocessing`; Lightning has
no such strategy, so this one keeps Lightning's launching, sampler, rank-0 logging and checkpointing by subclassing
`DDPStrategy` (as `litforge.parallel.diloco.DiLoCo` does) and changing what DDP would do:

- `configure_ddp` does not wrap the model in DistributedDataParallel (no gradient all-reduce). Rank 0 writes the
  flat fp32 parameters to a file under /dev/shm; every rank maps it (`torch.from_file(..., shared=True)`) and points
  each parameter's `.data` at its slice, so every optimizer step writes into the one shared copy. The file is
  unlinked as soon as every rank has mapped it (nothing is left behind, even after a crash); at teardown the
  parameters become private copies again (a later `trainer.test` is an ordinary one).
- No per-step collective: Lightning's per-batch SIGTERM broadcast is replaced by a local check
  (`litforge.runtime.compat.skip_sigterm_broadcast`), and litforge's callbacks that decide together (time_limit, the
  wall-clock `checkpoint_every`, the NaN-loss stop) do so only every `decide_every` steps
  (`litforge.runtime.ranks.meets_now`).
- Ranks do meet where a consistent view matters: before and after validation (every rank validates the same
  weights, nobody writes meanwhile) and around a checkpoint's state dict (one consistent snapshot, copied out of
  shared memory while every rank waits). Ranks take the same number of batches per epoch (the sampler), so they
  reach these points together.
- Staleness: a shared int64 counter per worker (each written by its owner only, so no lost updates) counts
  optimizer steps. A worker notes the others' total when it starts a batch (its read of the weights) and after its
  optimizer step (its write); the difference is how many updates it did not see. `hogwild/staleness_mean` and
  `hogwild/staleness_max` (over all workers' steps since the last validation) are logged at each validation;
  checkpoints carry `checkpoint["hogwild"]["updates"]`, the steps each worker has written.

Refused: BatchNorm (its running statistics are buffers, per worker, and would silently diverge), GPUs (shared host
memory only; use strategy=ddp there), and parameters that are not all one floating dtype.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.strategies import DDPStrategy

from litforge.core.bounds import Count
from litforge.core.errors import ConfigError
from litforge.parallel.strategies import attached_module
from litforge.runtime.compat import skip_sigterm_broadcast

GPU_MESSAGE = (
    "strategy=hogwild runs CPU worker processes sharing host memory only; on GPUs use strategy=ddp "
    "(or trainer=cpu for hogwild)"
)


def refuse_batch_norm(module: torch.nn.Module) -> None:
    """One line naming the fix when the net has BatchNorm layers (their statistics would differ per worker)."""
    norms = [name.rsplit(".", 1)[0] for name, _ in module.named_buffers() if name.endswith("running_mean")]
    if norms:
        raise ConfigError(
            f"strategy=hogwild shares parameters, not BatchNorm running statistics (the net has "
            f"{len(norms)} layers with running statistics, e.g. {norms[0]}): use a net without BatchNorm "
            "(model=mlp, experiment=gpt_char) or strategy=ddp"
        )


class Hogwild(DDPStrategy):
    """Worker processes update one shared copy of the parameters lock-free, each with its own optimizer."""

    strategy_name = "litforge_hogwild"

    def __init__(self, decide_every: Count = 100, **kwargs: Any) -> None:
        if not (isinstance(decide_every, int) and decide_every >= 1):
            raise ConfigError(
                f"strategy.decide_every={decide_every!r}: use an integer >= 1, e.g. strategy.decide_every=100"
            )
        kwargs.setdefault("forward_sync_buffers", False)
        super().__init__(**kwargs)
        self.decide_every = decide_every
        self.flat: torch.Tensor | None = None  # the shared parameters, one flat tensor
        self.updates: torch.Tensor | None = None  # shared int64 [world]: optimizer steps each worker has written
        self._seen = 0  # the others' updates when this worker read the weights
        self._stale_sum = 0
        self._stale_steps = 0
        self._stale_max = 0
        self._restored: list[int] | None = None
        self._snapshot_updates: list[int] | None = None  # each worker's steps when the last state dict was taken

    # ---- setup -----------------------------------------------------------------------------------------------
    def check_task(self, module: torch.nn.Module) -> None:
        """What litforge's train job checks before launching the ranks (configure_ddp checks again, for others)."""
        refuse_batch_norm(module)

    def setup_environment(self) -> None:
        if self.root_device.type != "cpu":
            raise ConfigError(GPU_MESSAGE)
        super().setup_environment()

    def configure_ddp(self) -> None:
        """No DDP wrapper: move the parameters into shared memory instead, and drop the per-step SIGTERM collective."""
        module = attached_module(self)
        refuse_batch_norm(module)
        params = list(module.parameters())
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ConfigError(
                f"strategy=hogwild shares parameters of one floating dtype, the net has {sorted(map(str, dtypes))}: "
                "keep the model's parameters in one dtype (trainer.precision changes compute, not them)"
            )
        dtype = next(iter(dtypes))
        total = sum(p.numel() for p in params)
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        token = self.broadcast(uuid.uuid4().hex if self.global_rank == 0 else None)
        path_params = Path(folder) / f"litforge-hogwild-{token}.params"
        path_updates = Path(folder) / f"litforge-hogwild-{token}.updates"
        if self.global_rank == 0:
            torch.cat([p.detach().reshape(-1) for p in params]).numpy().tofile(path_params)
            counts = (
                self._restored if self._restored and len(self._restored) == self.world_size else [0] * self.world_size
            )
            torch.tensor(counts, dtype=torch.int64).numpy().tofile(path_updates)
        self.barrier("hogwild-created")
        try:
            self.flat = torch.from_file(str(path_params), shared=True, size=total, dtype=dtype)
            self.updates = torch.from_file(str(path_updates), shared=True, size=self.world_size, dtype=torch.int64)
        finally:
            self.barrier("hogwild-mapped")
            if self.global_rank == 0:  # every rank has mapped them: the memory lives on, the names can go
                path_params.unlink(missing_ok=True)
                path_updates.unlink(missing_ok=True)
        offset = 0
        for p in params:
            p.data = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self._restored = None
        skip_sigterm_broadcast(module.trainer)

    def teardown(self) -> None:
        """Give every parameter a private copy again (shared memory is unmapped with the last reference)."""
        if self.flat is not None and self.lightning_module is not None:
            for p in self.lightning_module.parameters():
                p.data = p.data.clone()
            self.flat = self.updates = None
        super().teardown()

    # ---- training --------------------------------------------------------------------------------------------
    def _others(self) -> int:
        assert self.updates is not None
        counts = self.updates.tolist()
        return sum(counts) - counts[self.global_rank]

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        super().on_train_batch_start(batch, batch_idx)
        if self.updates is not None:
            self._seen = self._others()  # this batch's forward reads the weights as they are now

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | torch.nn.Module | None = None,
        **kwargs: object,
    ) -> Any:
        """The worker's own step, written into the shared weights; then count it and the updates it missed."""
        output = super().optimizer_step(optimizer, closure, model, **kwargs)
        if self.updates is not None:
            self.updates[self.global_rank] += 1  # this worker is the only writer of its slot
            stale = self._others() - self._seen
            self._stale_sum += stale
            self._stale_steps += 1
            self._stale_max = max(self._stale_max, stale)
        return output

    def on_validation_start(self) -> None:
        """Meet, so everyone validates the same weights; log every worker's staleness since the last validation."""
        super().on_validation_start()
        module = attached_module(self)
        trainer = module.trainer
        if self.updates is None or trainer.state.fn != "fit":
            return
        mine = [self._stale_sum, self._stale_steps, self._stale_max]
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine)  # also the barrier: nobody writes weights while anyone validates
        if trainer.sanity_checking:
            return
        steps = sum(row[1] for row in everyone)
        if steps:
            # equal on every rank (gathered); sync_dist only quiets Lightning's advice (one tiny all-reduce at the
            # end of validation, where the ranks meet anyway)
            mean, most = sum(row[0] for row in everyone) / steps, float(max(row[2] for row in everyone))
            for name, value in (("hogwild/staleness_mean", mean), ("hogwild/staleness_max", most)):
                module.log(name, value, on_step=False, on_epoch=True, sync_dist=True)
        self._stale_sum = self._stale_steps = self._stale_max = 0

    def on_validation_end(self) -> None:
        """Meet again: a rank that finished validating first must not write weights the others still read."""
        super().on_validation_end()
        if self.updates is not None:
            self.barrier("hogwild-validated")

    def on_train_end(self) -> None:
        """Meet: the fit's result is the shared weights after every worker's last write (not a rank's early copy)."""
        super().on_train_end()
        if self.updates is not None:
            self.barrier("hogwild-trained")

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """One consistent snapshot: every rank stops writing, the weights are copied out of shared memory, go on."""
        if self.flat is None:
            return super().lightning_module_state_dict()
        self.barrier("hogwild-snapshot")
        state = {k: v.detach().clone() for k, v in super().lightning_module_state_dict().items()}
        self._snapshot_updates = self.updates.tolist() if self.updates is not None else None
        self.barrier("hogwild-snapshot-taken")
        return state

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: object = None) -> None:
        """Add the optimizer steps each worker has written (`checkpoint["hogwild"]["updates"]`)."""
        if self._snapshot_updates is not None:
            checkpoint["hogwild"] = {"updates": self._snapshot_updates}
        super().save_checkpoint(checkpoint, filepath, storage_options)

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        """Keep the per-worker update counts of a resumed checkpoint until `configure_ddp` maps the counters."""
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        self._restored = (checkpoint.get("hogwild") or {}).get("updates")
        return checkpoint
