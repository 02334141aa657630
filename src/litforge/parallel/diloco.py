"""DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language Models").

Each data-parallel replica takes `sync_every` (H) inner optimizer steps on its own gradients with the configured
optimizer, communicating nothing; then the replicas average their parameter *change* since the last sync (the
"outer gradient", anchor - local) and an outer SGD with Nesterov momentum applies it to the shared anchor, which
every replica then continues from. Communication is one all-reduce of the parameters every H steps instead of one
of the gradients every step. With H=1, outer lr 1 and no outer momentum the anchor becomes the mean of the replicas
after one step each, which for SGD (linear in the gradient) is exactly DDP's step.

How it fits Lightning, with public APIs only: a `DDPStrategy` subclass (so launching, the distributed sampler, the
initial broadcast of rank 0's weights and checkpoint writing on rank 0 stay Lightning's) whose DDP wrapper gets a
communication hook that returns the local gradients untouched (DDP's `register_comm_hook`), and whose
`optimizer_step` runs the outer step every H inner steps. Lightning has no model-averaging option other than
torch's `PeriodicModelAverager`, which averages parameters, not parameter changes through an outer optimizer.

- The replicas also meet before each validation (the H counter restarts there), so validation, early stopping and
  the checkpoints written after it see the one global model. A checkpoint written between syncs (e.g. every N
  training steps, no validation) holds rank 0's replica; resuming from it continues from that replica.
- Checkpoints carry the outer state (`checkpoint["diloco"]`: anchor, outer optimizer state, counters), restored on
  resume. Inner optimizer state is per replica; like DDP's, the checkpoint holds rank 0's.
- `train/comm_bytes_per_step`: bytes each rank puts into all-reduces per optimizer step, averaged over the run so far.
- Floating-point buffers (BatchNorm running statistics) are averaged at each sync; DDP's per-forward buffer
  broadcast is switched off (it would be communication every step).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pydantic import Field
from pytorch_lightning.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel

from litforge.core.bounds import Count, Positive
from litforge.core.errors import ConfigError
from litforge.parallel.strategies import attached_module


def _local_gradients(_state, bucket):
    """A DDP communication hook that communicates nothing: each replica keeps its own gradients.

    Unannotated on purpose: DDP checks the hook's annotations and, under `from __future__ import annotations`,
    would see the string "dist.GradBucket" instead of the class and refuse the hook."""
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


class DiLoCo(DDPStrategy):
    """Replicas take `sync_every` local optimizer steps, then an outer Nesterov SGD applies their averaged change."""

    strategy_name = "litforge_diloco"

    def __init__(
        self,
        sync_every: Count = 32,
        outer_lr: Positive = 0.7,
        outer_momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9,
        find_unused_parameters: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("forward_sync_buffers", False)  # torch syncs buffers at wrap, not every forward
        super().__init__(find_unused_parameters=find_unused_parameters, **kwargs)
        self.sync_every, self.outer_lr, self.outer_momentum = sync_every, outer_lr, outer_momentum
        self.anchors: list[torch.Tensor] = []
        self.outer_optimizer: torch.optim.SGD | None = None
        self.steps_since_sync = 0
        self.optimizer_steps = 0  # inner steps this run has taken (restored on resume)
        self.bytes_sent = 0  # bytes this rank put into all-reduces (restored on resume)
        self.syncs = 0
        self._restored: dict[str, Any] | None = None

    # ---- setup -----------------------------------------------------------------------------------------------
    def configure_ddp(self) -> None:
        """Wrap in DDP (which broadcasts rank 0's weights), silence its gradient all-reduce, then take the anchor."""
        super().configure_ddp()
        wrapped = self.model
        if not isinstance(wrapped, DistributedDataParallel):  # DDPStrategy.configure_ddp has just wrapped it
            raise RuntimeError(f"DiLoCo expected a DistributedDataParallel model, got {type(wrapped).__name__}")
        wrapped.register_comm_hook(None, _local_gradients)
        params = list(attached_module(self).parameters())
        self.anchors = [p.detach().clone() for p in params]
        # Nesterov needs momentum > 0 in torch.optim.SGD; without momentum the outer step is plain SGD.
        self.outer_optimizer = torch.optim.SGD(
            self.anchors, lr=self.outer_lr, momentum=self.outer_momentum, nesterov=self.outer_momentum > 0
        )
        if self._restored is not None:
            self._load_outer_state(self._restored)
            self._restored = None

    # ---- training --------------------------------------------------------------------------------------------
    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | torch.nn.Module | None = None,
        **kwargs: object,
    ) -> Any:
        """One inner step; every `sync_every` of them, the outer step."""
        output = super().optimizer_step(optimizer, closure, model, **kwargs)
        self.optimizer_steps += 1
        self.steps_since_sync += 1
        if self.steps_since_sync >= self.sync_every:
            self.outer_step()
        return output

    def on_validation_start(self) -> None:
        """Meet before validating, so every rank validates (and checkpoints) the same global model."""
        super().on_validation_start()
        trainer = attached_module(self).trainer
        if self.steps_since_sync > 0 and self.outer_optimizer is not None and trainer.state.fn == "fit":
            self.outer_step()

    @torch.no_grad()
    def outer_step(self) -> None:
        """Average the replicas' change since the anchor, apply it with the outer optimizer, restart from the anchor."""
        assert self.outer_optimizer is not None
        module = attached_module(self)
        params = list(module.parameters())
        buffers = [b for b in module.buffers() if b.is_floating_point()]
        # One flat all-reduce (one collective per sync, whatever the number of tensors); gloo has no AVG: SUM / n.
        flat = torch.cat(
            [(a - p).reshape(-1) for a, p in zip(self.anchors, params, strict=True)]
            + [b.reshape(-1).to(self.anchors[0].dtype) for b in buffers]
        )
        if self.world_size > 1:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat /= self.world_size
            self.bytes_sent += flat.numel() * flat.element_size()
        pieces = flat.split([t.numel() for t in (*self.anchors, *buffers)])
        for anchor, delta in zip(self.anchors, pieces, strict=False):  # pieces: the anchors, then the buffers
            anchor.grad = delta.view_as(anchor).clone()
        self.outer_optimizer.step()
        self.outer_optimizer.zero_grad(set_to_none=True)
        for p, anchor in zip(params, self.anchors, strict=True):
            p.copy_(anchor)
        for b, mean in zip(buffers, pieces[len(self.anchors) :], strict=True):
            b.copy_(mean.view_as(b))
        self.steps_since_sync = 0
        self.syncs += 1
        if module.trainer is not None and module.trainer.training:
            # one value per epoch (on_epoch): written whatever trainer.log_every_n_steps is. Equal on every rank, so
            # no sync_dist (which would also add a collective wherever rank 0 alone reads the metrics)
            module.log(
                "train/comm_bytes_per_step",
                self.bytes_sent / max(self.optimizer_steps, 1),
                on_step=False,
                on_epoch=True,
                reduce_fx="max",
                rank_zero_only=True,
            )

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: object = None) -> None:
        """Add the outer state (anchor, outer momentum, counters) to what Lightning saves."""
        if self.outer_optimizer is not None:
            checkpoint["diloco"] = {
                "anchors": [a.detach().cpu() for a in self.anchors],
                "outer_optimizer": self.outer_optimizer.state_dict(),
                "steps_since_sync": self.steps_since_sync,
                "optimizer_steps": self.optimizer_steps,
                "bytes_sent": self.bytes_sent,
                "syncs": self.syncs,
            }
        super().save_checkpoint(checkpoint, filepath, storage_options)

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        """Keep the outer state of a resumed checkpoint until `configure_ddp` has built the outer optimizer."""
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        self._restored = checkpoint.get("diloco")  # applied only when a fit builds the outer optimizer
        return checkpoint

    def _load_outer_state(self, state: dict[str, Any]) -> None:
        if len(state["anchors"]) != len(self.anchors):
            raise ConfigError(
                f"the checkpoint's DiLoCo state has {len(state['anchors'])} parameter tensors, the "
                f"model {len(self.anchors)}: resume with the model the checkpoint was trained with"
            )
        for anchor, saved in zip(self.anchors, state["anchors"], strict=True):
            anchor.copy_(saved.to(anchor.device))
        assert self.outer_optimizer is not None
        self.outer_optimizer.load_state_dict(state["outer_optimizer"])
        for key in ("steps_since_sync", "optimizer_steps", "bytes_sent", "syncs"):
            setattr(self, key, int(state[key]))
