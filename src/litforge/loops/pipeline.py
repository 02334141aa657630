"""The training, validation and test steps of strategy=pipeline: a `torch.distributed.pipelining` schedule per batch.

Why a loop of litforge's own: Lightning has no pipeline-parallel strategy (its DeepSpeed one is GPU-only and not a
`torch.distributed.pipelining` schedule), and a pipeline schedule runs forward, backward and the gradient
accumulation of all micro-batches itself, so the step cannot be Lightning's automatic optimization. The pipeline
strategy (litforge.parallel.pipeline.Pipeline) fills in Lightning's strategy extension points `training_step`,
`validation_step` and `test_step` with :class:`PipelineLoop`'s (Lightning calls the strategy's, which by default call
the task's), and the loop drives the optimizer itself under manual optimization.

Tasks stay unchanged because the loss is the task's own `step_loss(micro_batch)`: the schedule's `loss_fn` on the
last stage calls it with the task's `net` standing aside for a module that answers with the pipeline's output for
that micro-batch (:func:`given_output`), so the task's loss, its metrics and its batch layout all keep working. The
last stage then broadcasts the batch's output to every rank, where the same `step_loss` calls (or the task's own
`validation_step` / `test_step`) run on it: every rank logs the same loss and holds the same metric states (their
end-of-epoch syncs then meet on every rank). That broadcast costs one output tensor per batch (B x classes, or
B x T x vocab for a language model).

Gradients equal one process's: micro-batches are of equal size (:func:`micro_batches`) and the accumulated gradient
is divided by their number once per parameter (:meth:`PipelineLoop.scale_gradients`; torch's own per-stage
`scale_grads` would divide a weight shared by two stages of one rank twice), so it is the whole batch's mean-loss
gradient. A weight held by two stages on two ranks (the GPT's embedding tied to its head, on the first and last stage)
gets its two partial gradients summed between those ranks before the step; on one rank (zero_bubble puts the first
and last stage on rank 0) autograd sums them.

Pipeline x data parallel (`dp_group`, strategy.data_parallel > 1): after the schedule, the stage's accumulated
gradients are averaged over the ranks that hold the same stage in the other replicas, in one flat all-reduce
(:meth:`PipelineLoop.average_gradients`). Why not the DDP wrapper `torch.distributed.pipelining` supports (its stage
runs micro-batches under `no_sync()` and lets DDP reduce in the last backward): under `ScheduleGPipe` on torch 2.14
DDP's reducer fails its second step ("rebuilt parameter indices size is not same as original model parameters
size": 8 vs 4 for a 2-layer stage), while 1F1B works; one all-reduce after the step is schedule-independent and
as cheap (one bucket per step). The batch loss is averaged over the replicas too, so every rank logs the global
loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed import pipelining as pp
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle
from torchmetrics import Metric

from litforge.core.contracts import LoopSteppedTask, net_of, own_training_step
from litforge.core.errors import ConfigError
from litforge.runtime.compat import counted_optimizer_step, forward_only

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")  # strategy.schedule
MULTI_STAGE = ("interleaved_1f1b", "zero_bubble")  # the schedules that run several stages per rank
StepOutput = TypeVar("StepOutput")  # what the task's own validation or test step returns


class GivenOutput(nn.Module):
    """A stand-in net whose forward returns the output it was last given (the pipeline's, for one micro-batch)."""

    output: Tensor | None = None

    def forward(self, *args: object, **kwargs: object) -> Tensor | None:
        return self.output


@contextmanager
def given_output(task: nn.Module, output: Tensor, stand_in: GivenOutput | None = None) -> Iterator[None]:
    """Inside, the task's `net` is a :class:`GivenOutput` of `output` (the pipeline's result; `stand_in`, reused
    per step, or a new one): the task's own `forward` and `step_loss` run, and where they call the net they get the
    pipeline's output. The net's stages are held by the schedule, so they are not touched; the net is back on
    exit."""
    stand_in = stand_in if stand_in is not None else GivenOutput()
    net, stand_in.output = task.get_submodule("net"), output
    task.net = stand_in
    try:
        yield
    finally:
        task.net = net
        stand_in.output = None


def micro_batches(batch: tuple[Any, ...], n: int, num_ranks: int = 1) -> list[tuple[Any, ...]]:
    """`batch` (a tuple of tensors, or None entries) cut along dim 0 into equal consecutive micro-batches: `n` of
    them, or for a batch `n` does not divide (a partial last batch) the largest count below `n` that divides it
    (and that torch's interleaved schedule takes over `num_ranks` ranks: :func:`interleavable`).

    Equal sizes because a pipeline stage infers its receive buffers from the first micro-batch; and then the mean
    of the micro-batch losses is the batch's mean loss, so the gradients equal one process's."""
    size = len(batch[0])
    n = max(d for d in range(1, min(n, size) + 1) if size % d == 0 and interleavable(d, num_ranks))
    parts = [t.chunk(n) if isinstance(t, Tensor) else [t] * n for t in batch]
    return [tuple(p[i] for p in parts) for i in range(n)]


def interleavable(microbatches: int, num_ranks: int) -> bool:
    """Whether `ScheduleInterleaved1F1B` over `num_ranks` ranks takes this many micro-batches: it runs them in
    rounds of about `num_ranks` and needs a whole number of rounds."""
    rounds = max(1, microbatches // num_ranks)
    return microbatches % rounds == 0


class PipelineLoop:
    """One rank's part of the pipeline: its stage(s), the schedules, and the steps the pipeline strategy runs in
    place of the task's.

    `stage` / `stage_index`: this rank's stage and its index, or for the multi-stage schedules (interleaved_1f1b,
    zero_bubble) its stages and their indices; `num_stages` counts the stages of all ranks and `stage_ranks` gives
    the global rank of each."""

    def __init__(
        self,
        task: pl.LightningModule,
        stage: nn.Module | list[nn.Module],
        stage_index: int | list[int],
        num_stages: int,
        schedule: str,
        microbatches: int,
        group: dist.ProcessGroup | None,
        stage_ranks: list[int],
        tied: list[nn.Parameter],
        tied_group: dist.ProcessGroup | None,
        device: torch.device,
        clip_val: float | None = None,
        clip_algorithm: str = "norm",
        net_inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
        dp_group: dist.ProcessGroup | None = None,
    ) -> None:
        if not isinstance(task, LoopSteppedTask) or net_of(task) is None:
            raise TypeError(
                f"strategy=pipeline runs a LitforgeTask's step_loss on its net, not {type(task).__name__}'s"
            )
        self.stages = list(stage) if isinstance(stage, list) else [stage]
        self.indices = list(stage_index) if isinstance(stage_index, list) else [stage_index]
        self.task, self.num_stages = task, num_stages
        # this rank's parameters, each once (the GPT's tied embedding/head sits in two stages on rank 0 of zero_bubble)
        self.params = list({id(p): p for s in self.stages for p in s.parameters()}.values())
        self.num_ranks = len(set(stage_ranks))
        self.schedule, self.microbatches, self.group, self.stage_ranks = schedule, microbatches, group, stage_ranks
        self.tied, self.tied_group, self.device = tied, tied_group, device
        self.clip_val, self.clip_algorithm = clip_val, clip_algorithm
        # what the first stage takes of a micro-batch: the inputs (packed text: and the document ids)
        self.net_inputs = net_inputs or (lambda micro: micro[:1])
        self.is_first, self.is_last = 0 in self.indices, num_stages - 1 in self.indices
        self._schedules: dict[tuple[object, ...], PipelineScheduleSingle | PipelineScheduleMulti] = {}
        self._micro: list[tuple[Any, ...]] = []
        self._inferring = False
        self._stand_in = GivenOutput()  # the task's net while its step_loss / eval step reads the pipeline's output
        self.dp_group = dp_group
        self.replicas = dist.get_world_size(dp_group) if dp_group is not None else 1

    # ---- installing -------------------------------------------------------------------------------------------
    def install(self) -> None:
        """Refuse a task whose own `training_step` the loop would skip; manual optimization (the loop steps the
        optimizer); under data parallelism the task's metrics sync over the replicas."""
        task = self.task
        if owner := own_training_step(task):
            raise ConfigError(
                f"strategy=pipeline drives the task's step_loss(batch) per micro-batch in place of its training_step, "
                f"but {owner} overrides training_step: move that code into step_loss, or use another strategy"
            )
        task.automatic_optimization = False
        if self.dp_group is not None:  # metrics sync over the replicas (every stage of one holds the same states)
            for metric in task.modules():
                if isinstance(metric, Metric):
                    metric.process_group = self.dp_group

    # ---- the schedules ----------------------------------------------------------------------------------------
    def _schedule_for(
        self, micro: list[tuple[Any, ...]], train: bool
    ) -> PipelineScheduleSingle | PipelineScheduleMulti:
        """A PipelineStage + schedule per (mode, micro-batch shapes): a stage infers its shapes at its first step and
        keeps its receive buffers, so a partial last batch (or a validation batch size) needs its own."""
        key = (train, tuple(tuple(tuple(t.shape) for t in m if isinstance(t, Tensor)) for m in micro))
        if key not in self._schedules:
            stages = [
                pp.PipelineStage(module, index, self.num_stages, self.device, group=self.group)
                for module, index in zip(self.stages, self.indices, strict=True)
            ]
            # the gradient's 1/n is applied once per parameter by scale_gradients (torch's per-stage scaling would
            # apply it twice to a weight two local stages share)
            loss_fn = self._loss if train else None
            if self.schedule in MULTI_STAGE:  # also for evaluation: their stage placement is the schedule's own
                cls = pp.ScheduleInterleaved1F1B if self.schedule == "interleaved_1f1b" else pp.ScheduleZBVZeroBubble
                schedule = cls(list(stages), len(micro), loss_fn=loss_fn, scale_grads=False)
                self._schedules[key] = schedule if train else forward_only(schedule)
            else:
                single = pp.Schedule1F1B if self.schedule == "1f1b" and train else pp.ScheduleGPipe
                self._schedules[key] = single(stages[0], len(micro), loss_fn=loss_fn, scale_grads=False)
            self._inferring = train  # its first step starts with one shape-inference call of the loss
        return self._schedules[key]

    def _loss(self, output: Tensor, index: Tensor) -> Tensor:
        """The schedule's loss on the last stage: the task's own `step_loss` of the micro-batch.

        The schedule's target is the micro-batch's index (it takes tensors only, a task's batch is a tuple). A
        stage's first step also calls this once, before the micro-batches, on a detached copy of the target, to
        infer gradient shapes: that call gets a stand-in loss, so the task's training metrics count each micro-batch
        once (tests/test_pipeline.py checks the metric, so a torch that stops making that call fails loudly)."""
        if self._inferring:
            self._inferring = False
            return output.float().sum() * 0.0
        with given_output(self.task, output, self._stand_in):
            return self.task.step_loss(self._micro[int(index.item())])

    def run(self, batch: tuple[Any, ...], train: bool) -> tuple[Tensor, list[tuple[Any, ...]], list[Tensor]]:
        """One pass of the schedule over `batch`: (the output, the micro-batches, the micro-batch losses (training
        only)), the same on every rank."""
        self._micro = micro = micro_batches(
            batch, self.microbatches, self.num_ranks if self.schedule == "interleaved_1f1b" else 1
        )
        n = len(micro)
        schedule = self._schedule_for(micro, train)
        arg_mbs = [tuple(self.net_inputs(m)) for m in micro] if self.is_first else [() for _ in micro]
        target_mbs = [torch.tensor([i]) for i in range(n)] if self.is_last and train else None
        losses: list[Tensor] = []
        if not train:
            with torch.no_grad():
                return self._broadcast(schedule.eval(arg_mbs=arg_mbs)), micro, losses
        output = self._broadcast(schedule.step(arg_mbs=arg_mbs, target_mbs=target_mbs, losses=losses))
        self.scale_gradients(n)
        if not self.is_last:  # the same step_loss calls on the broadcast output: same losses, same metric updates
            with torch.no_grad():
                for part, out in zip(micro, output.tensor_split(n), strict=True):
                    with given_output(self.task, out, self._stand_in):
                        losses.append(self.task.step_loss(part))
        return output, micro, losses

    @torch.no_grad()
    def scale_gradients(self, n: int) -> None:
        """The accumulated gradient (a sum over `n` micro-batch mean losses) divided by `n`: the batch's mean-loss
        gradient, each parameter once."""
        for p in self.params:
            if p.grad is not None:
                p.grad.div_(n)

    def _broadcast(self, output: Tensor | None) -> Tensor:
        """The last stage's merged output, on every rank of this pipeline."""
        src = self.stage_ranks[-1]
        meta = [(tuple(output.shape), output.dtype) if output is not None else None]
        dist.broadcast_object_list(meta, src=src, group=self.group)
        received = meta[0]
        if received is None:  # the last stage's schedule always returns the merged output
            raise RuntimeError(f"pipeline: the last stage (rank {src}) broadcast no output")
        shape, dtype = received
        out = (
            output.detach().contiguous() if output is not None else torch.empty(shape, dtype=dtype, device=self.device)
        )
        dist.broadcast(out, src=src, group=self.group)
        return out

    # ---- the steps the pipeline strategy runs ------------------------------------------------------------------------
    def training_step(self, batch: tuple[Any, ...], batch_idx: int) -> Tensor:
        """One optimizer step on `batch` through the pipeline; the batch's loss, equal on every rank."""
        task = self.task
        trainer = task.trainer
        where = task.step_position(batch_idx)
        lightning_optimizer = task.optimizers()
        if isinstance(lightning_optimizer, list):
            raise ConfigError(
                f"strategy=pipeline steps one optimizer; {type(task).__name__} configures {len(lightning_optimizer)}"
            )
        optimizer = lightning_optimizer.optimizer
        optimizer.zero_grad(set_to_none=True)
        _, _, losses = self.run(tuple(batch), train=True)
        loss = self.global_loss(losses)
        self.average_gradients()
        self.sum_tied_gradients()
        if self.clip_val:
            self.clip_gradients(float(self.clip_val))
        with counted_optimizer_step(lightning_optimizer):  # global_step counts this step
            optimizer.step()
        for config in trainer.lr_scheduler_configs:
            if config.interval == "step" and trainer.global_step % config.frequency == 0:
                task.lr_scheduler_step(config.scheduler, None)
        task.log_training_loss(loss, batch, where)
        return loss

    def global_loss(self, losses: list[Tensor]) -> Tensor:
        """The batch's loss (the mean of its micro-batches'), averaged over the data-parallel replicas: the loss of
        the whole global batch, the same on every rank (one scalar all-reduce per step when data_parallel > 1)."""
        loss = torch.stack([part.detach() for part in losses]).mean()
        if self.dp_group is not None:
            dist.all_reduce(loss, group=self.dp_group)  # SUM then divide: gloo has no ReduceOp.AVG
            loss = loss / self.replicas
        return loss

    @torch.no_grad()
    def average_gradients(self) -> None:
        """Data parallel: the stage's gradients averaged over its replicas, in one flat all-reduce. Every replica
        runs the same stage on same-shaped micro-batches, so the same parameters hold gradients on each (no host
        read to agree on it)."""
        if self.dp_group is None:
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.dp_group)  # SUM, then divide: gloo has no ReduceOp.AVG
        flat /= self.replicas
        for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(part.view_as(g))

    def sum_tied_gradients(self) -> None:
        """Sum the partial gradients of weights two stages share (the GPT's embedding and head) between them."""
        if self.tied_group is None:
            return
        for p in self.tied:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=self.tied_group)

    @torch.no_grad()
    def clip_gradients(self, max_value: float) -> None:
        """trainer.gradient_clip_val over the whole net: by value (elementwise, local), or by the global norm of all
        stages' gradients, as `clip_grad_norm_` on one process (a tied weight counted once, on the first stage)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(self.params, max_value)
            return
        tied = {id(p) for p in self.tied}
        mine = [p.grad for p in self.params if p.grad is not None and (id(p) not in tied or self.is_first)]
        square = (
            torch.stack([g.detach().float().pow(2).sum() for g in mine]).sum()
            if mine
            else torch.zeros((), device=self.device)
        )
        dist.all_reduce(square, group=self.group)
        coefficient = (max_value / (square.sqrt() + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype))

    def evaluation_step(
        self, task_step: Callable[..., StepOutput], batch: Sequence[Tensor], batch_idx: int, *args: object
    ) -> StepOutput:
        """The task's validation or test step (`task_step`), run on every rank on the forward pipeline's output."""
        output, _, _ = self.run(tuple(batch), train=False)
        with given_output(self.task, output, self._stand_in):
            return task_step(batch, batch_idx, *args)
