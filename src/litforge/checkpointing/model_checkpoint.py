"""`last.ckpt`, the latest training state, kept by Lightning's own `ModelCheckpoint`, unmonitored.

A run has two of Lightning's `ModelCheckpoint`s (conf/callbacks/default.yaml), the pattern Lightning documents for
"the best and the latest": `model_checkpoint` monitors `objective.metric` and keeps the top-k files (the first
checkpoint callback, so `trainer.checkpoint_callback.best_model_path` is the best file: the test and metrics.json
use it), and `last_checkpoint` monitors nothing and keeps one file named `last` (`save_top_k: 1`,
`enable_version_counter: false`), rewritten at every epoch end (after every validation when validation runs
mid-epoch) and so always the latest step. `ModelCheckpoint(save_last=True)` on the monitored callback is not used:
Lightning 2.6 writes that `last.ckpt` only in a step where a top-k file was saved, so it would stay at the best
epoch once the metric stops improving. `checkpoint_every` adds a third one of the same kind
(litforge.checkpointing.clock), and SIGTERM and `time_limit` save the same file through :func:`save_latest`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

LAST = "last"  # the file name (without .ckpt) every latest-state checkpoint callback writes


def last_checkpoint(
    dirpath: str | Path | None,
    *,
    every_n_train_steps: int | None = None,
    train_time_interval: timedelta | None = None,
    every_n_epochs: int | None = None,
) -> ModelCheckpoint:
    """Lightning's ModelCheckpoint keeping `<dirpath>/last.ckpt` at the latest step, on its triggers (none: every
    epoch end)."""
    return ModelCheckpoint(
        dirpath=dirpath,
        filename=LAST,
        monitor=None,
        save_top_k=1,
        enable_version_counter=False,
        every_n_train_steps=every_n_train_steps,
        train_time_interval=train_time_interval,
        every_n_epochs=every_n_epochs,
    )


def latest_callbacks(trainer: pl.Trainer) -> list[ModelCheckpoint]:
    """The run's checkpoint callbacks that keep `last.ckpt` (unmonitored, file name `last`)."""
    return [
        cb
        for cb in trainer.checkpoint_callbacks
        if isinstance(cb, ModelCheckpoint) and cb.monitor is None and cb.filename == LAST
    ]


def latest_path(trainer: pl.Trainer) -> str | None:
    """The `last.ckpt` this run wrote (metrics.json's `last_checkpoint`), or None."""
    return next((cb.best_model_path for cb in latest_callbacks(trainer) if cb.best_model_path), None)


def save_latest(trainer: pl.Trainer) -> tuple[str, float]:
    """Write `last.ckpt` at the current step on every rank together; returns (path, seconds the save took).

    Into the folder of the run's `last_checkpoint` callbacks, whose saved state names the file as after their own
    save; `<run folder>/checkpoints/last.ckpt` without one (callbacks.last_checkpoint=null).
    """
    start = time.perf_counter()
    callbacks = latest_callbacks(trainer)
    folder = (
        next((cb.dirpath for cb in callbacks if cb.dirpath), None) or Path(trainer.default_root_dir) / "checkpoints"
    )
    path = str(Path(folder) / f"{LAST}{ModelCheckpoint.FILE_EXTENSION}")
    for callback in callbacks:
        callback.best_model_path = path  # part of the saved state: set before the write, as Lightning does
    trainer.save_checkpoint(path)
    return path, time.perf_counter() - start
