"""`ModelCheckpoint` whose `last.ckpt` is always the latest training state, whatever the monitored metric does.

Lightning 2.6's `ModelCheckpoint(save_last=True)` writes `last.ckpt` only in a step where a top-k checkpoint was
saved too ("Only save last checkpoint if a checkpoint was actually saved in this step", in `on_validation_end` and
`on_train_epoch_end`). With `save_top_k=1` and a metric that stops improving, `last.ckpt` stays at the best epoch:
`resume=auto` after a crash restarts from there and silently retrains the epochs since, and metrics.json's
`last_checkpoint` points at the best weights, not the last. This subclass keeps Lightning's best-checkpoint
selection untouched (`monitor`, `mode`, `save_top_k`, file names) and owns `last.ckpt` itself: it is written after
every validation and every training-epoch end of `fit`, when training ends (a `max_steps` stop mid-epoch included),
and whenever :meth:`write_last` is called (litforge.callbacks.checkpoint_clock's `checkpoint_every` and
`time_limit` saves). Never twice for the same step.

Only public Lightning API is used (`trainer.save_checkpoint`, `format_checkpoint_name`, `last_model_path`, which is
part of the callback's saved state and is set before each write, as Lightning does).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from weakref import proxy

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint as LightningModelCheckpoint

from litforge.errors import ConfigError


class ModelCheckpoint(LightningModelCheckpoint):
    """Lightning's `ModelCheckpoint` (same arguments) with a `last.ckpt` that always holds the latest step.

    `save_last` takes true or false; Lightning's `"link"` (a symlink to the newest top-k file) is refused, because
    the newest top-k file is not the latest state.
    """

    def __init__(self, *args: Any, save_last: bool | None = None, **kwargs: Any) -> None:
        if save_last not in (None, True, False):
            raise ConfigError(f"callbacks.model_checkpoint.save_last={save_last!r} is not supported: litforge writes "
                              "last.ckpt itself at the latest step; pass callbacks.model_checkpoint.save_last=true")
        super().__init__(*args, save_last=False, **kwargs)  # Lightning's own last.ckpt logic stays off
        self.keep_last = bool(save_last)
        self._last_written_step = -1
        self.last_write_seconds = 0.0

    def write_last(self, trainer: pl.Trainer, again: bool = False) -> str | None:
        """Write `last.ckpt` at the current step (all ranks call this together); returns its path, or None if off.

        A no-op before any step was taken, outside `fit`, and when it was already written at this step, unless
        `again` (after a validation, which changes the state a resume needs: metrics, best score, early stopping).
        """
        if not self.keep_last or self.dirpath is None:
            return None
        step = trainer.global_step
        if step == 0 or (step == self._last_written_step and not again) or trainer.sanity_checking \
                or trainer.fast_dev_run or trainer.state.fn != "fit":
            return self.last_model_path or None
        path = self.format_checkpoint_name({}, self.CHECKPOINT_NAME_LAST)
        self.last_model_path = path  # part of the saved state: set it before the write
        start = time.perf_counter()
        trainer.save_checkpoint(path, self.save_weights_only)
        self.last_write_seconds = time.perf_counter() - start  # litforge.callbacks.time_limit keeps a margin for it
        self._last_written_step = step
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))
        return path

    # after Lightning's own (best top-k) save in the same hook, so both files hold the same step
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        self.write_last(trainer, again=True)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        self.write_last(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_last(trainer)


def save_latest(trainer: pl.Trainer) -> tuple[str, float]:
    """Write `last.ckpt` at the current step on every rank together; returns (path, seconds the save took).

    Through litforge's ModelCheckpoint when the run has one (so its state and `last_model_path` stay right),
    otherwise straight to `<run folder>/checkpoints/last.ckpt` (callbacks.model_checkpoint=null).
    """
    start = time.perf_counter()
    callback = trainer.checkpoint_callback
    path = callback.write_last(trainer) if isinstance(callback, ModelCheckpoint) and callback.keep_last else None
    if path is None:
        path = str(Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt")
        trainer.save_checkpoint(path)
    return path, time.perf_counter() - start
