"""`checkpoint_every=<steps or duration>`: a resumable `last.ckpt` mid-epoch, so a SIGKILL loses at most that much.

Schedulers that pre-empt without warning (spot instances, a node failure, `kill -9`) leave only what is on disk.
`checkpoint_every=500` writes `last.ckpt` after every 500th optimizer step; `checkpoint_every=30min` after the
first step boundary 30 minutes after the previous one (rank 0's clock decides, broadcast to every rank, so all ranks
save together). The file is the same `last.ckpt` as at epoch ends (litforge.checkpointing.model_checkpoint), written
through the atomic checkpoint plugin, and it resumes exactly mid-epoch: the loop position comes from Lightning and
the loader's position from its `state_dict`
(tests/test_reliability.py::test_checkpoint_every_saves_mid_epoch_and_a_kill_9_resumes_exactly).

Lightning's `ModelCheckpoint(every_n_train_steps=..., train_time_interval=...)` is not used for this: with a monitored
validation metric it defers those saves to the next validation ("defer the save until validation has produced the
metric"), and it would mix clock saves into the best-checkpoint ranking.
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

from litforge.checkpointing.model_checkpoint import save_latest
from litforge.config.durations import parse_every
from litforge.runtime.ranks import meets_now
from litforge.core.errors import ConfigError


class CheckpointEvery(Callback):
    """Save `last.ckpt` every `every` optimizer steps (an int) or every `every` of wall time (`30min`, `2h`)."""

    def __init__(self, every: int | str) -> None:
        super().__init__()
        parsed = parse_every(every)
        if parsed is None:
            raise ConfigError(f"checkpoint_every={every!r} is neither a step count nor a duration: pass e.g. "
                              "checkpoint_every=500 or checkpoint_every=30min")
        self.unit, self.interval = parsed
        self._last_save = time.monotonic()
        self._last_step = 0
        self.saves = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_save = time.monotonic()
        self._last_step = trainer.global_step  # a resumed run counts from its checkpoint's step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step, previous = trainer.global_step, self._last_step
        self._last_step = step
        if step == previous:  # no optimizer step in this batch (gradient accumulation)
            return
        if self.unit == "steps":  # crossing a multiple, not hitting it: steps_per_call > 1 advances N at a time
            due = step // int(self.interval) > previous // int(self.interval)
        elif not meets_now(trainer):  # hogwild: the ranks decide together only every strategy.decide_every steps
            return
        else:
            due = trainer.strategy.broadcast(time.monotonic() - self._last_save >= self.interval)
        if due:
            save_latest(trainer)
            self._last_save = time.monotonic()
            self.saves += 1


def clock_callbacks(checkpoint_every: Any, time_limit: Any) -> list[Callback]:
    """The callbacks the top-level keys `checkpoint_every` and `time_limit` ask for (none when both are off)."""
    from litforge.callbacks.time_limit import TimeLimit, resolve_deadline

    callbacks: list[Callback] = [] if checkpoint_every is None else [CheckpointEvery(checkpoint_every)]
    deadline = resolve_deadline(time_limit)
    if deadline is not None:
        callbacks.append(TimeLimit(deadline))
    return callbacks
