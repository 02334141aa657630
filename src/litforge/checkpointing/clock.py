"""`checkpoint_every=<steps or duration>`: a resumable `last.ckpt` mid-epoch, so a SIGKILL loses at most that much.

Schedulers that pre-empt without warning (spot instances, a node failure, `kill -9`) leave only what is on disk.
`checkpoint_every=500` is Lightning's `ModelCheckpoint(every_n_train_steps=500)` (saves at multiples of 500; with
`steps_per_call=N` pick a multiple of N), `checkpoint_every=30min` its `train_time_interval` (rank 0's clock
decides, broadcast by Lightning, so all ranks save together; under hogwild only every `strategy.decide_every`
steps): an unmonitored ModelCheckpoint writing the same `last.ckpt` as the epoch-end one
(litforge.checkpointing.model_checkpoint), through the atomic checkpoint plugin, so it never enters the
best-checkpoint ranking and no validation metric defers it. It resumes exactly mid-epoch: the loop position comes
from Lightning and the loader's position from its `state_dict`
(tests/test_reliability.py::test_checkpoint_every_saves_mid_epoch_and_a_kill_9_resumes_exactly).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.checkpointing.model_checkpoint import LAST, last_checkpoint
from litforge.runtime.durations import parse_every
from litforge.runtime.ranks import meets_now


def checkpoint_every(every: int | str, dirpath: str | Path | None = None) -> ModelCheckpoint:
    """Lightning's ModelCheckpoint writing `last.ckpt` every `every` optimizer steps (an int) or every `every` of
    wall time (`30min`, `2h`)."""
    parsed = parse_every(every)
    assert parsed is not None, every  # the config check refused the rest (litforge.config.settings.Every)
    unit, interval = parsed
    if unit == "steps":
        return last_checkpoint(dirpath, every_n_train_steps=int(interval))
    return ClockCheckpoint(
        dirpath=dirpath,
        filename=LAST,
        monitor=None,
        save_top_k=1,
        enable_version_counter=False,
        train_time_interval=timedelta(seconds=float(interval)),
    )


class ClockCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint(train_time_interval=...), asking the clock only on the steps where the ranks may
    meet. Why not the plain class: Lightning broadcasts rank 0's clock decision on every training step, a
    collective that makes every rank wait for the slowest; under strategy=hogwild that defeats asynchronous training,
    so there the clock is read every `strategy.decide_every` steps (litforge.runtime.ranks.meets_now, as the NaN stop
    and time_limit do). Synchronous strategies meet every step: nothing changes for them."""

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        if meets_now(trainer):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
