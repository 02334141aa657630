"""`time_limit=<duration>` (or SLURM's job end time): save a resumable checkpoint and exit before the limit.

A scheduler that ends a job at its time limit sends SIGTERM shortly before SIGKILL (SLURM: `KillWait`, 30 s by
default), which may be too little to finish a step, a validation and a large save. This callback stops on its own
instead: after each optimizer step it compares the time left with a margin it measures, and when the margin no
longer fits it writes `last.ckpt` at that step (litforge.checkpointing.model_checkpoint.save_latest) and ends the run
with exit code 75 (EX_TEMPFAIL: "try again") and the command that continues it. No metrics.json is written, so the
run stays *interrupted* and `resume=auto` picks it up.

The margin is `floor + 2 x slowest step + slowest validation + 2 x slowest checkpoint save`, each measured in this
run (before the first save, the save is estimated from the parameter bytes at 50 MB/s, weights plus two optimizer
moments). `floor` is 30 s.

The limit: `time_limit=3h55min` counts from this process's start (the job's start under a scheduler), `04:00:00`
works too; `time_limit=auto` (the default) uses the SLURM job's end time when running under SLURM, and no limit
elsewhere: `SLURM_JOB_END_TIME` (a Unix time Slurm 23.02 and later set in the job's environment), else what the
scheduler says (`squeue -h -j $SLURM_JOB_ID -o %e`: Slurm 22.05 sets no such variable; litforge.runtime.slurm); with
both a duration and SLURM, the earlier wins.
Lightning's `Trainer(max_time=...)` is not used: it stops like a finished run (testing, metrics.json) and keeps no
margin for the save. Under DDP, rank 0's clock decides for every rank (broadcast), so all ranks save together.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.checkpointing.clock import checkpoint_every
from litforge.checkpointing.io import AtomicCheckpointIO
from litforge.checkpointing.model_checkpoint import save_latest
from litforge.core.errors import ConfigError, TrainingStopped
from litforge.runtime.durations import is_time_limit, parse_duration
from litforge.runtime.ranks import meets_now
from litforge.runtime.slurm import job_end_time

EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): not finished, run it again
FLOOR_S = 30.0
ASSUMED_WRITE_BYTES_PER_S = 50e6  # a slow network filesystem; replaced by the measured save time after one save


def process_start_time() -> float:
    """Unix time this process started (Linux /proc); the current time where that cannot be read."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def resolve_deadline(
    value: object, env: Mapping[str, str] = os.environ, started: Callable[[], float] = process_start_time
) -> float | None:
    """The Unix time `time_limit=value` ends at (None: no limit), SLURM's job end time included where it is set."""
    if value is None:
        return None
    if not is_time_limit(value):
        raise ConfigError(
            f"time_limit={value!r} is not a duration: pass e.g. time_limit=3h55min, time_limit=04:00:00 "
            "or time_limit=auto (SLURM's job end time)"
        )
    limits = []
    if value != "auto":
        seconds = parse_duration(value)
        assert seconds is not None  # is_time_limit accepted it
        limits.append(started() + seconds)
    slurm = job_end_time(env)
    if slurm is not None:
        limits.append(slurm)
    return min(limits) if limits else None


class TimeLimit(Callback):
    """Stop with a resumable `last.ckpt` once the time left before `deadline` (a Unix time) is under the margin."""

    def __init__(self, deadline: float, floor_s: float = FLOOR_S, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.deadline, self.floor_s, self.clock = deadline, floor_s, clock
        self.slowest_step = self.slowest_validation = self.slowest_save = 0.0
        self._step_start = self._validation_start = None  # type: float | None

    def margin(self, pl_module: pl.LightningModule | None) -> float:
        """Seconds the rest of a step, a validation and the save may need, as measured so far."""
        save = self.slowest_save
        if save == 0.0 and pl_module is not None:
            params = sum(p.numel() * p.element_size() for p in pl_module.parameters())
            save = 3 * params / ASSUMED_WRITE_BYTES_PER_S
        return self.floor_s + 2 * self.slowest_step + self.slowest_validation + 2 * save

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self._step_start = self.clock()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validation_start = self.clock()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validation_start is not None:
            self.slowest_validation = max(self.slowest_validation, self.clock() - self._validation_start)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        now = self.clock()
        if self._step_start is not None:
            self.slowest_step = max(self.slowest_step, now - self._step_start)
        self.note_save_time(trainer)
        margin = self.margin(pl_module)
        left = self.deadline - now
        if not meets_now(trainer):  # hogwild: the ranks decide together only every strategy.decide_every steps
            return
        if not trainer.strategy.broadcast(left <= margin):
            return
        path, seconds = save_latest(trainer)
        raise TrainingStopped(
            f"time_limit: stopped at step {trainer.global_step} (epoch {trainer.current_epoch}) with {left:.0f} s "
            f"left (margin {margin:.0f} s; this save took {seconds:.1f} s); saved {path}. Continue with: "
            f"python train.py resume={trainer.default_root_dir}",
            exit_code=EXIT_CODE,
        )

    def note_save_time(self, trainer: pl.Trainer) -> None:
        """The slowest checkpoint write so far, as litforge's atomic checkpoint plugin measured it."""
        io = trainer.strategy.checkpoint_io
        if isinstance(io, AtomicCheckpointIO):
            self.slowest_save = max(self.slowest_save, io.last_save_seconds)


def clock_callbacks(
    checkpoint_every_: int | str | None, time_limit: str | None, checkpoint_dir: str | Path | None = None
) -> list[Callback]:
    """The callbacks the top-level keys `checkpoint_every` and `time_limit` ask for (none when both are off);
    `checkpoint_dir`: the run's checkpoint folder."""
    callbacks: list[Callback] = []
    if checkpoint_every_ is not None:
        callbacks.append(checkpoint_every(checkpoint_every_, checkpoint_dir))
    deadline = resolve_deadline(time_limit)
    if deadline is not None:
        callbacks.append(TimeLimit(deadline))
    return callbacks
