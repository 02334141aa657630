"""strategy=pipeline: pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019 "PipeDream").

The net is cut into `trainer.devices` consecutive stages (litforge.parallel.pipeline_split), one per process; each
batch is cut into `strategy.microbatches` micro-batches that flow through the stages under a
`torch.distributed.pipelining` schedule (`ScheduleGPipe`: all forwards, then all backwards; `Schedule1F1B`: one
forward, one backward in steady state, so at most `stages` micro-batches' activations are alive per stage).

How it fits Lightning, with public APIs: a `DDPStrategy` subclass (so launching, the gloo/nccl process group,
rank-0 logging and checkpoint writing stay Lightning's) that does not wrap the model in DDP, gives every rank the
whole batch (all stages see the same data: the first its inputs, the last its targets), and installs
litforge.loops.pipeline.PipelineLoop, which runs the schedule and the optimizer step (tasks stay unchanged).

Checkpoints are ordinary single-file checkpoints: every rank builds the whole net (each trains only its stage), and
before a state dict is taken each tensor is broadcast from the stage that trains it, so rank 0 writes the full,
current weights and the optimizer states of all stages merged. eval.py, predict.py and export.py read it like any
other; on resume every rank loads it and trains its own part. This keeps the whole model (and, when saving, its
optimizer state) on every process: fine up to models one host's (one device's) memory holds; beyond that a
sharded checkpoint would be needed, which this strategy does not write.

Refused in one line: nets that cannot be split (BatchNorm, no `pipeline_stages`), tasks without a per-step loss,
MixUp/CutMix (task.mix), gradient accumulation (raise the batch size: micro-batches accumulate already).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from pytorch_lightning.strategies import DDPStrategy

from litforge.errors import ConfigError
from litforge.loops.pipeline import SCHEDULES, PipelineLoop


def net_inputs(task: Any) -> Any:
    """What the first stage takes of a batch: the net's input; for packed text (task.packed) also the document
    ids, which every stage of the GPT then passes on (GPTStage)."""
    if getattr(task, "packed", False):
        return lambda batch: (batch[0], batch[2])
    return lambda batch: batch[:1]


class Pipeline(DDPStrategy):
    """One pipeline stage per process; a torch.distributed.pipelining schedule drives each training step."""

    strategy_name = "litforge_pipeline"

    def __init__(self, schedule: str = "1f1b", microbatches: int = 4, **kwargs: Any) -> None:
        if schedule not in SCHEDULES:
            raise ConfigError(f"strategy.schedule={schedule!r} is not one of {', '.join(SCHEDULES)}: "
                              "e.g. strategy.schedule=1f1b")
        if not (isinstance(microbatches, int) and microbatches >= 1):
            raise ConfigError(f"strategy.microbatches={microbatches!r}: use an integer >= 1, "
                              "e.g. strategy.microbatches=4")
        super().__init__(**kwargs)
        self.schedule, self.microbatches = schedule, microbatches
        self.loop: PipelineLoop | None = None
        self.clip_val: float | None = None
        self.clip_algorithm = "norm"
        self.owners: dict[str, list[int]] = {}

    # ---- refusals ---------------------------------------------------------------------------------------------
    def check_task(self, task: Any) -> None:
        """What litforge's train job checks before launching the ranks (the split is checked again per rank)."""
        from litforge.contracts import SteppableTask
        from litforge.parallel.pipeline_split import split_net

        fix = "or use strategy=ddp"
        if not isinstance(task, SteppableTask) or not isinstance(getattr(task, "net", None), torch.nn.Module):
            raise ConfigError(f"strategy=pipeline needs a task with a `net` and a per-step loss (task=classification, "
                              f"task=language_model); {type(task).__name__} has none: {fix}")
        if getattr(task, "mixer", None) is not None:
            raise ConfigError(f"strategy=pipeline does not mix images across micro-batches: pass task.mix=none {fix}")
        split_net(task.net, 1)  # BatchNorm or no pipeline_stages: refused before any rank starts

    def check_run(self, datamodule: Any, trainer_kwargs: dict[str, Any], callbacks: list[Any]) -> None:
        """Refuse the data and trainer settings a pipeline step cannot honour; add the epoch-scheduler stepper
        (the loop drives the optimizer under manual optimization, where Lightning steps no scheduler)."""
        from litforge.loops.steps_per_call import EpochSchedulers

        batch_size = getattr(datamodule, "batch_size", None)
        if isinstance(batch_size, int) and batch_size % self.microbatches:
            raise ConfigError(f"data.batch_size={batch_size} is not divisible by strategy.microbatches="
                              f"{self.microbatches}: use a multiple, e.g. data.batch_size="
                              f"{max(1, round(batch_size / self.microbatches)) * self.microbatches}")
        # every stage reads the very batches one process would (a DistributedSampler, even over one replica,
        # shuffles in another order than the loader's own sampler)
        trainer_kwargs["use_distributed_sampler"] = False
        # clipping moves from the Trainer (which refuses it under manual optimization) into the loop, which takes
        # the norm over all stages
        self.clip_val = trainer_kwargs.pop("gradient_clip_val", None)
        self.clip_algorithm = trainer_kwargs.pop("gradient_clip_algorithm", None) or "norm"
        if trainer_kwargs.get("accumulate_grad_batches", 1) != 1:
            raise ConfigError(f"trainer.accumulate_grad_batches={trainer_kwargs['accumulate_grad_batches']} under "
                              "strategy=pipeline: raise data.batch_size instead (micro-batches already accumulate), "
                              "or pass trainer.accumulate_grad_batches=1")
        callbacks.append(EpochSchedulers(1, processes_ok=True))

    # ---- data: every stage sees the whole batch -----------------------------------------------------------------
    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": 1, "rank": 0}

    # ---- setup --------------------------------------------------------------------------------------------------
    def configure_ddp(self) -> None:
        """No DDP wrapper: cut the net, keep this rank's stage, install the schedule loop (before the optimizers)."""
        self._install()

    def setup(self, trainer: Any) -> None:
        self.sync_full_net()  # a later trainer.test without a checkpoint: Lightning broadcasts rank 0's whole net
        super().setup(trainer)
        self._install()  # validate / test / a fit's later trainer.test: the loop is already there (idempotent)

    def _install(self) -> None:
        from litforge.parallel.pipeline_split import owners, split_net

        module = self.lightning_module
        if self.loop is None:
            with torch.no_grad():  # what DDP's wrapper would do: every rank starts from rank 0's weights
                for tensor in (*module.parameters(), *module.buffers()):
                    dist.broadcast(tensor.data, src=0)
            stages = split_net(module.net, self.world_size)
            self.owners = {f"net.{name}": where for name, where in owners(module.net, stages).items()}
            rank = self.global_rank
            tied = [p for p in stages[rank].parameters()
                    if sum(any(p is q for q in s.parameters()) for s in stages) > 1]
            holders = sorted({i for where in self.owners.values() if len(where) > 1 for i in where})
            # every rank takes part in creating a group (a collective), also those outside it
            tied_group = dist.new_group(holders) if holders else None
            self.loop = PipelineLoop(module, stages[rank], rank, self.world_size, self.schedule, self.microbatches,
                                     group=None, stage_ranks=list(range(self.world_size)), tied=tied,
                                     tied_group=tied_group if rank in holders else None, device=self.root_device,
                                     clip_val=self.clip_val, clip_algorithm=self.clip_algorithm,
                                     net_inputs=net_inputs(module))
        self.loop.install()

    # ---- checkpoints: one ordinary file -------------------------------------------------------------------------
    def sync_full_net(self) -> None:
        """Every tensor of the net broadcast from the (first) stage that trains it: all ranks hold the whole model."""
        if self.owners and self.world_size > 1:
            sync_full_net(self.lightning_module, self.owners)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        self.sync_full_net()  # called on every rank by Lightning's checkpoint dump
        return super().lightning_module_state_dict()

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """The optimizer states of all stages merged (each rank's holds only its stage's parameters)."""
        state = super().optimizer_state(optimizer)
        if self.world_size == 1 or not self.owners:
            return state
        return merged_optimizer_state(state, self.world_size)


@torch.no_grad()
def sync_full_net(module: torch.nn.Module, owners: dict[str, list[int]]) -> None:
    """Broadcast each tensor of `module` named in `owners` (state-dict name -> stages holding it, stage = rank)
    from its first holder, so that every rank holds the whole, current model (a collective: all ranks call it)."""
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    for name, where in owners.items():
        dist.broadcast(tensors[name].data, src=where[0])


def merged_optimizer_state(state: dict[str, Any], world_size: int) -> dict[str, Any]:
    """One optimizer `state_dict` from every rank's (each holds state only for its stage's parameters; the same
    parameter indices on every rank, since every rank's optimizer was built over the whole net)."""
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, {k: {n: v.cpu() if isinstance(v, torch.Tensor) else v for n, v in s.items()}
                                      for k, s in state["state"].items()})
    merged: dict[Any, Any] = {}
    for rank_state in everyone:
        merged.update(rank_state)
    return {**state, "state": dict(sorted(merged.items()))}
