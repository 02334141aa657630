"""`steps_per_call=N`: N optimizer steps per Lightning training step, on one device (Keras' `steps_per_execution`).

Why: Lightning's per-step machinery (the hooks of every callback, progress tracking, logging) costs ~1,000-2,000
Python calls, more than a small net's whole step; paid once per N optimizer steps it nearly vanishes
(benchmarks/step_overhead.py measures it). Lightning has no such switch.

How, without changing tasks or datamodules: :class:`StepsPerCall` is Lightning's one-device strategy with two of
its extension points filled in (:func:`install` builds it in place of `strategy=auto`):

- `process_dataloader` wraps the training loader in :class:`GroupedBatches`: each item is N consecutive batches of
  the original loader, concatenated (the very samples, in the very order, of N=1);
- `training_step` (the strategy's, which Lightning calls in place of the task's) slices the item back into the N
  batches and, for each, calls the task's per-step loss `step_loss(batch)`, then backward, clipping,
  `optimizer.step()` and the step-interval schedulers: what Lightning's automatic optimization does on one device,
  written out, under manual optimization;
- a callback steps epoch-interval schedulers (Lightning does so only under automatic optimization).

`trainer.global_step`, `max_steps`, checkpoint names and the loggers' x-axis all count optimizer steps, so a run
equals its N=1 twin bit for bit (tests/test_steps_per_call.py). The three Lightning internals this needs are in
litforge.runtime.compat. Settings whose meaning N>1 would change are refused in one line by :func:`install`.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.strategies import SingleDeviceStrategy
from torch import Tensor

from litforge.core.contracts import (
    DataModule,
    LoopSteppedTask,
    StatefulLoader,
    lacks,
    missing_members,
    own_training_step,
)
from litforge.core.errors import ConfigError
from litforge.runtime.compat import advance_logger_step, counted_optimizer_step

log = logging.getLogger(__name__)
Chosen = TypeVar("Chosen")  # the strategy the run asked for, returned as it is when steps_per_call=1


@runtime_checkable
class Batches(Protocol):
    """A training loader as steps_per_call groups it: its length, and batches that are tuples of tensors."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Sequence[Tensor]]: ...


class GroupedBatches:
    """The items of `loader`, `steps` at a time, concatenated along the batch dimension (tuples of tensors).

    Lightning sees a loader `steps` times shorter. It finds the inner loader's sampler (`set_epoch` each epoch) and,
    when the inner loader is stateful (litforge's in-memory loader), its `state_dict` for mid-epoch resume: each
    item is consumed whole by the training step, so the inner position is always at an item boundary.
    """

    def __init__(self, loader: Batches, steps: int) -> None:
        self.loader = loader
        self.steps = steps

    def __len__(self) -> int:
        return -(-len(self.loader) // self.steps)

    def __iter__(self) -> Iterator[Sequence[Tensor]]:
        batches = iter(self.loader)
        while group := list(itertools.islice(batches, self.steps)):
            yield group[0] if len(group) == 1 else tuple(torch.cat(parts) for parts in zip(*group, strict=True))

    @property
    def sampler(self) -> object:
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self) -> object:
        return getattr(self.loader, "batch_sampler", None)


class StatefulGroupedBatches(GroupedBatches):
    """:class:`GroupedBatches` of a loader with `state_dict`/`load_state_dict`, which Lightning saves in checkpoints."""

    def __init__(self, loader: StatefulBatches, steps: int) -> None:
        super().__init__(loader, steps)
        self.stateful = loader

    def state_dict(self) -> dict[str, Any]:
        return self.stateful.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stateful.load_state_dict(state)


class StatefulBatches(Batches, StatefulLoader, Protocol):
    """A training loader whose position travels in checkpoints (litforge's in-memory loader)."""


def grouped(loader: Batches, steps: int) -> GroupedBatches:
    if isinstance(loader, StatefulLoader):
        return StatefulGroupedBatches(loader, steps)
    return GroupedBatches(loader, steps)


def optimizer_steps_in_run(trainer: pl.Trainer) -> int:
    """Optimizer steps the run will take: what a schedule sized to the run (cosine's T_max, onecycle) needs.

    Lightning's estimate counts loaded batches; when each holds several optimizer steps, count those instead
    (exactly, so that the schedule equals the one of steps_per_call=1).
    """
    estimate = int(trainer.estimated_stepping_batches)  # also sets up the training loader
    loader = trainer.train_dataloader
    if not isinstance(loader, GroupedBatches):
        return estimate
    calls = int(trainer.num_training_batches)
    per_epoch = len(loader.loader) if calls >= len(loader) else calls * loader.steps  # limit_train_batches cut
    steps = per_epoch * max(1, trainer.max_epochs or 1)
    return min(steps, trainer.max_steps) if trainer.max_steps > 0 else steps


class StepsPerCall(SingleDeviceStrategy):
    """Lightning's one-device strategy, training `steps` optimizer steps per training step (see the module
    docstring); `steps="auto"` is decided when Lightning first asks for the training loader."""

    def __init__(
        self,
        device: torch.device,
        steps: int | str,
        micro_batch_size: int,
        clip_val: float | None,
        clip_algorithm: str,
        datamodule: pl.LightningDataModule,
        schedulers: EpochSchedulers,
    ) -> None:
        super().__init__(device=device)
        self.steps = steps
        self.micro_batch_size = micro_batch_size
        self.clip_val = clip_val
        self.clip_algorithm = clip_algorithm
        self.datamodule = datamodule  # steps_per_call=auto's probe reads a fresh batch from it
        self.schedulers = schedulers  # the epoch-scheduler callback, told the N that auto chose

    def process_dataloader(self, dataloader: object) -> object:
        """The training loader, `steps` batches per item (validation and test loaders pass as they are)."""
        dataloader = super().process_dataloader(dataloader)
        task = self.lightning_module
        if task is None or not task.trainer.training:
            return dataloader
        if not isinstance(dataloader, Batches):
            raise TypeError(f"steps_per_call groups a training loader of known length, not a {type(dataloader)}")
        if self.steps == "auto":  # decided once, at the first training loader of the run
            self.steps = self.schedulers.steps = auto_steps(task, self.datamodule, dataloader)
        return grouped(dataloader, int(self.steps))

    def stepped_task(self) -> LoopSteppedTask:
        """The task, whose `step_loss` this strategy drives (install() refused any other)."""
        task = self.lightning_module
        if task is None or not isinstance(task, LoopSteppedTask):
            raise TypeError(f"steps_per_call steps a LitforgeTask's step_loss, not a {type(task).__name__}'s")
        return task

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        """In place of the task's `training_step` (Lightning's own strategy calls that one): the task's `step_loss`
        on each of the item's batches, one optimizer step each; logged as the task's `training_step` logs."""
        task = self.stepped_task()
        with self.precision_plugin.train_step_context():
            where = task.step_position(batch_idx)
            losses = self.run_steps(batch, task.step_loss)
            task.log_training_loss(losses, batch, where)
        return losses  # one loss per optimizer step: the NaN guard names the exact step

    def run_steps(self, batch: tuple[Tensor, ...], step_loss: Callable[[tuple[Tensor, ...]], Tensor]) -> Tensor:
        """Optimizer steps on consecutive `micro_batch_size` slices of `batch`; the loss of each step."""
        task = self.lightning_module
        if task is None:
            raise RuntimeError("steps_per_call: the strategy holds no task")
        trainer = task.trainer
        lightning_optimizer = task.optimizers()
        if isinstance(lightning_optimizer, list):
            raise ConfigError(
                f"steps_per_call={self.steps} steps one optimizer; {type(task).__name__} configures "
                f"{len(lightning_optimizer)}: set steps_per_call=1"
            )
        optimizer = lightning_optimizer.optimizer
        step_schedulers = [c for c in trainer.lr_scheduler_configs if c.interval == "step"]
        params = [p for group in optimizer.param_groups for p in group["params"]] if self.clip_val else []
        losses = []
        for micro in zip(*(t.split(self.micro_batch_size) for t in batch), strict=True):
            if 0 < trainer.max_steps <= trainer.global_step:
                break  # the step budget ends inside this batch
            loss = step_loss(micro)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip_val:
                if self.clip_algorithm == "value":
                    torch.nn.utils.clip_grad_value_(params, self.clip_val)
                else:
                    torch.nn.utils.clip_grad_norm_(params, self.clip_val)
            with counted_optimizer_step(lightning_optimizer):  # global_step counts this step
                optimizer.step()
            for config in step_schedulers:
                if trainer.global_step % config.frequency == 0:
                    task.lr_scheduler_step(config.scheduler, None)
            losses.append(loss.detach())
        # the loggers' x-axis: Lightning advances it by one per training step; make it count optimizer steps, as
        # with steps_per_call=1 (curves of runs with different N line up, and match checkpoint names)
        advance_logger_step(trainer, len(losses) - 1)
        return torch.stack(losses)


class EpochSchedulers(pl.Callback):
    """Epoch-interval LR schedulers under manual optimization (Lightning steps them only under automatic).

    Stepped where Lightning's automatic loop steps them, so checkpoints hold the same scheduler state as with
    steps_per_call=1: a plain schedule after the epoch's last batch (before the epoch-end validation, whose
    `last.ckpt` must already hold it), ReduceLROnPlateau after the epoch-end validation that produced its metric.
    A resumed run that restarts at an epoch's end (no batch left) does not step again, nor does a `max_steps` stop
    inside an epoch. An epoch of unknown length (a streamed dataset) steps at the epoch's end.
    """

    def __init__(self, steps: int | str, processes_ok: bool = False) -> None:
        self.steps = steps
        self.processes_ok = processes_ok  # strategy=pipeline: its loop steps the optimizer on every rank
        self._batches_this_epoch = 0
        self._last_batch_done = False  # the epoch's last batch ran: the next validation is the epoch-end one
        self._stepped: set[int] = set()  # ids of the schedulers already stepped this epoch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size > 1 and not self.processes_ok:  # e.g. trainer.devices=2 picked DDP
            raise ConfigError(
                f"steps_per_call={self.steps} runs on one device, but this run has {trainer.world_size} "
                "processes: set steps_per_call=1 for multi-device training"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._batches_this_epoch = 0
        self._last_batch_done = False
        self._stepped.clear()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        self._batches_this_epoch += 1
        if batch_idx + 1 == trainer.num_training_batches:  # inf for a streamed epoch: never equal
            self._last_batch_done = True
            self._step(trainer, pl_module, plateau=False)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._last_batch_done and not trainer.sanity_checking:  # the epoch-end validation
            self._step(trainer, pl_module, plateau=True)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._batches_this_epoch:  # a resume that restarted at this epoch's end: stepped before the save
            return
        if trainer.num_training_batches != float("inf") and not self._last_batch_done:
            return  # a max_steps stop inside the epoch: Lightning does not step epoch schedulers either
        self._step(trainer, pl_module, plateau=False)
        self._step(trainer, pl_module, plateau=True)  # no validation ended this epoch (e.g. check_val_every_n_epoch)

    def _step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, plateau: bool) -> None:
        scheduler = pl_module.scheduler_cfg if isinstance(pl_module, LoopSteppedTask) else None
        monitor = scheduler.get("monitor") if scheduler else None
        for config in trainer.lr_scheduler_configs:
            is_plateau = isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            if (
                config.interval != "epoch"
                or is_plateau != plateau
                or id(config.scheduler) in self._stepped
                or (trainer.current_epoch + 1) % config.frequency
            ):
                continue
            metric = None
            if is_plateau:
                metric = trainer.callback_metrics.get(monitor) if monitor is not None else None
                if metric is None:
                    raise ConfigError(
                        f"scheduler.monitor={monitor} is not logged by this run; logged: "
                        f"{', '.join(sorted(trainer.callback_metrics))}"
                    )
            pl_module.lr_scheduler_step(config.scheduler, metric)
            self._stepped.add(id(config.scheduler))


# ---- steps_per_call=auto ---------------------------------------------------------------------------------------
OVERHEAD_SHARE = 0.05  # Lightning's per-call cost may be at most this share of the N optimizer steps it serves
AUTO_CAP = 64  # the most optimizer steps one Lightning step runs under auto (logging/NaN checks act per call)
# Lightning's per-step cost, in units of one empty Python call timed on the machine at start (so it follows the
# machine's speed and load, like the step time it is compared with): the default digits run makes ~1,100 more
# Python calls per Lightning step than a plain loop (tests/test_speed.py), and on the idle 2-core machine of
# benchmarks/README.md one of them costs ~20 empty calls' time (2,116 extra calls cost 1.29 ms per step; an empty
# call takes ~0.03 us). An estimate: measuring the run's own per-step cost would need N=1 steps first.
LIGHTNING_STEP_IN_TRIVIAL_CALLS = 1_100 * 20


def choose_steps_per_call(
    step_seconds: float,
    overhead_seconds: float,
    batches_per_epoch: int | float,
    share: float = OVERHEAD_SHARE,
    cap: int = AUTO_CAP,
) -> int:
    """The smallest N with `overhead_seconds <= share * N * step_seconds`, within [1, min(cap, batches per epoch)]."""
    wanted = math.ceil(overhead_seconds / (share * max(step_seconds, 1e-9)))
    limit = cap if batches_per_epoch == float("inf") else min(cap, int(batches_per_epoch))
    return max(1, min(wanted, limit))


def trivial_call_seconds(calls: int = 5_000) -> float:
    """Seconds per call of an empty Python function, now, on this machine (its speed and its load)."""

    def nothing() -> None:
        return None

    rounds = []
    for _ in range(5):  # the median, as for the step time: both under the same load
        start = time.perf_counter()
        for _ in range(calls):
            nothing()
        rounds.append((time.perf_counter() - start) / calls)
    return sorted(rounds)[2]


def time_optimizer_step(
    task: pl.LightningModule, optimizer: torch.optim.Optimizer, batch: object, warmup: int = 2, repeats: int = 5
) -> float:
    """Median seconds of one optimizer step (`step_loss`, backward, `optimizer.step`) of `task` on `batch`, taken on
    a copy of the task and a fresh optimizer of the same kind: the run's weights, optimizer state and RNG stream
    are left exactly as they were, so the run equals its steps_per_call=N twin."""
    rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        probe = copy.deepcopy(task, {id(task.trainer): None})  # the task without its Trainer (not copied along)
        if not isinstance(probe, LoopSteppedTask):
            raise TypeError(f"steps_per_call=auto times a task's step_loss; {type(task).__name__} has none")
        probe.train()
        params = [p for p in probe.parameters() if p.requires_grad]
        accepted = inspect.signature(type(optimizer)).parameters  # `defaults` may hold derived keys (AdamW's)
        opt = type(optimizer)(params, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
        times = []
        for i in range(warmup + repeats):
            start = time.perf_counter()
            loss = probe.step_loss(batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if loss.device.type == "cuda":
                torch.cuda.synchronize(loss.device)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        torch.random.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def auto_steps(task: pl.LightningModule, datamodule: pl.LightningDataModule, loader: Batches) -> int:
    """steps_per_call=auto: N from this run's measured step time (see :func:`choose_steps_per_call`)."""
    trainer = task.trainer
    raw = next(iter(datamodule.train_dataloader()))  # a fresh loader: the run's own is not advanced
    batch = trainer.strategy.batch_to_device(raw)
    batch = datamodule.on_after_batch_transfer(batch, 0)  # normalisation, as the training step sees it
    step = time_optimizer_step(task, trainer.optimizers[0], batch)
    overhead = LIGHTNING_STEP_IN_TRIVIAL_CALLS * trivial_call_seconds()
    steps = choose_steps_per_call(step, overhead, len(loader))
    log.info(
        "steps_per_call=auto: N=%d (an optimizer step takes %.2f ms; Lightning's per-step cost is about "
        "%.2f ms, at most %d%% of N steps; cap %d and %d batches per epoch)",
        steps,
        step * 1e3,
        overhead * 1e3,
        round(OVERHEAD_SHARE * 100),
        AUTO_CAP,
        len(loader),
    )
    return steps


def install(
    steps: int | str,
    task: object,
    datamodule: pl.LightningDataModule,
    trainer_kwargs: dict[str, Any],
    strategy: Chosen,
    callbacks: list[pl.Callback],
) -> Chosen | StepsPerCall:
    """The strategy that runs steps_per_call=`steps` (1: `strategy` as it is); `task` is switched to manual
    optimization, `datamodule` is left as it is.

    `steps="auto"` picks N when Lightning first asks for the training loader (the task is then on its device and
    its optimizer built): :func:`auto_steps` times a few optimizer steps on a copy of the task and takes the
    smallest N that makes Lightning's per-step cost at most 5 % of N steps (1 for a net whose step is slow).

    Refuses, with the fix, the settings whose meaning would silently change: several devices (each step needs its
    own DDP forward), gradient accumulation, fp16 loss scaling and weight averaging (which Lightning applies per
    training step), and tasks without a per-step loss. Gradient clipping moves from the Trainer (which refuses it
    without automatic optimization) into the step loop. Appends the epoch-scheduler callback to `callbacks`.
    """
    if steps == 1:  # its type and range: litforge.config.settings
        return strategy
    fix = "set steps_per_call=1"
    if not isinstance(task, pl.LightningModule):  # the Trainer trains nothing else
        raise TypeError(f"steps_per_call={steps} needs a LightningModule task, not {type(task).__name__}")
    if not isinstance(task, LoopSteppedTask):
        raise ConfigError(
            f"steps_per_call={steps} needs a task with a per-step loss (`step_loss`, as "
            f"task=classification and task=language_model have); {type(task).__name__} lacks "
            f"{lacks(missing_members(task, LoopSteppedTask))}: {fix}"
        )
    if owner := own_training_step(task):
        raise ConfigError(
            f"steps_per_call={steps} drives the task's step_loss(batch) in place of its training_step, but {owner} "
            f"overrides training_step: move that code into step_loss, or {fix}"
        )
    if not isinstance(datamodule, DataModule) or not isinstance(datamodule.batch_size, int):
        raise ConfigError(
            f"steps_per_call={steps} needs a datamodule with a `batch_size` (data="
            f"{type(datamodule).__name__} has none): {fix}"
        )
    if strategy not in (None, "auto"):
        raise ConfigError(
            f"steps_per_call={steps} runs on one device, not with a strategy={strategy}: "
            f"{fix} for multi-process training"
        )
    if trainer_kwargs.get("accumulate_grad_batches", 1) != 1:
        raise ConfigError(
            f"steps_per_call={steps} and trainer.accumulate_grad_batches="
            f"{trainer_kwargs['accumulate_grad_batches']} cannot be combined: raise data.batch_size "
            f"instead, or {fix}"
        )
    if str(trainer_kwargs.get("precision", "")).startswith("16"):
        raise ConfigError(
            f"steps_per_call={steps} does not do fp16 loss scaling: use trainer.precision=bf16-mixed "
            f"or 32-true, or {fix}"
        )
    averaging = [type(cb).__name__ for cb in callbacks if isinstance(cb, WeightAveraging)]
    if averaging:
        raise ConfigError(
            f"steps_per_call={steps}: {averaging[0]} averages once per Lightning step, i.e. every "
            f"{steps} optimizer steps; drop the ema callback or {fix}"
        )
    clip_val = trainer_kwargs.pop("gradient_clip_val", None)
    clip_algorithm = trainer_kwargs.pop("gradient_clip_algorithm", None) or "norm"  # norm | value (validation)

    task.automatic_optimization = False  # the strategy's training_step steps the optimizer itself
    schedulers = EpochSchedulers(steps)
    callbacks.append(schedulers)
    device = one_device(steps, trainer_kwargs)
    return StepsPerCall(device, steps, datamodule.batch_size, clip_val, clip_algorithm, datamodule, schedulers)


def one_device(steps: int | str, trainer_kwargs: dict[str, Any]) -> torch.device:
    """The device Lightning picks for these trainer settings (its own choice, made by a Trainer built for nothing
    else), refused when they ask for several processes."""
    probe = pl.Trainer(
        **{key: trainer_kwargs[key] for key in ("accelerator", "devices", "num_nodes") if key in trainer_kwargs},
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if probe.world_size > 1 or not isinstance(probe.strategy, SingleDeviceStrategy):
        raise ConfigError(
            f"steps_per_call={steps} runs on one device, but this run has {probe.world_size} processes: set "
            "steps_per_call=1 for multi-device training"
        )
    return probe.strategy.root_device
