"""`ModelCheckpoint` whose `last.ckpt` is always the latest training state, whatever the monitored metric does.

Lightning 2.6's `ModelCheckpoint(save_last=True)` writes `last.ckpt` only in a step where a top-k checkpoint was
saved too ("Only save last checkpoint if a checkpoint was actually saved in this step", in `on_validation_end` and
`on_train_epoch_end`). With `save_top_k=1` and a metric that stops improving, `last.ckpt` stays at the best epoch:
`resume=auto` after a crash restarts from there and silently retrains the epochs since, and metrics.json's
`last_checkpoint` points at the best weights, not the last. This subclass keeps Lightning's best-checkpoint
selection untouched (`monitor`, `mode`, `save_top_k`, file names) and owns `last.ckpt` itself: it is written after
every validation and every training-epoch end of `fit`, when training ends (a `max_steps` stop mid-epoch included),
and whenever :meth:`write_last` is called (litforge.checkpointing.clock's `checkpoint_every` and
`time_limit` saves). Never twice for the same step.

It is written in the hook where Lightning saves its top-k file, right after that save (at the training epoch's end
after an epoch-end validation, Lightning's default; at the validation's end otherwise). On an epoch that saved a
best file, `last.ckpt` holds exactly that file's bytes, so it becomes a second name of it (a hard link, swapped in
atomically by litforge.checkpointing.io) instead of a second serialisation and fsync: an improving epoch of the digits
run then writes one checkpoint, not two. Later writes replace the name, never the file, so the best file is never
changed through it.

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

from litforge.runtime.compat import top_k_saves_at_train_epoch_end
from litforge.core.errors import ConfigError


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
        self._validated_at_step = -1  # an epoch-end validation ended at this step; last.ckpt follows at the epoch end
        self.last_write_seconds = 0.0

    def write_last(self, trainer: pl.Trainer, again: bool = False, same_as: str | None = None) -> str | None:
        """Write `last.ckpt` at the current step (all ranks call this together); returns its path, or None if off.

        A no-op before any step was taken, outside `fit`, and when it was already written at this step, unless
        `again` (after a validation, which changes the state a resume needs: metrics, best score, early stopping).
        `same_as`: a checkpoint file this callback saved at this very step, in this very state (Lightning's top-k
        save in the same hook): `last.ckpt` then becomes a second name of its bytes (:func:`_publish_as_link`).
        """
        if not self.keep_last or self.dirpath is None:
            return None
        step = trainer.global_step
        fast_dev_run = trainer.fast_dev_run  # type: ignore[attr-defined]  # set by a connector, undeclared on Trainer
        if step == 0 or (step == self._last_written_step and not again) or trainer.sanity_checking \
                or fast_dev_run or trainer.state.fn != "fit":
            return self.last_model_path or None
        path = self.format_checkpoint_name({}, self.CHECKPOINT_NAME_LAST)
        self.last_model_path = path  # part of the saved state: set it before the write
        start = time.perf_counter()
        if same_as is None or not _publish_as_link(trainer, same_as, path):
            trainer.save_checkpoint(path, self.save_weights_only)
            # what a full save costs: litforge.callbacks.time_limit keeps a margin for it (a link costs ~nothing)
            self.last_write_seconds = time.perf_counter() - start
        self._last_written_step = step
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))
        return path

    # last.ckpt is written in the hook where Lightning saves its top-k file, right after it, so both hold the same
    # step; after an epoch-end validation that is the epoch's end (Lightning's default), after any other at its end
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if top_k_saves_at_train_epoch_end(self, trainer) and not trainer.sanity_checking:
            super().on_validation_end(trainer, pl_module)  # Lightning saves nothing here then
            self._validated_at_step = trainer.global_step  # the epoch-end write below must not skip this step
            return
        self._with_top_k(trainer, lambda: super(ModelCheckpoint, self).on_validation_end(trainer, pl_module),
                         again=True)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        again = self._validated_at_step == trainer.global_step
        self._with_top_k(trainer, lambda: super(ModelCheckpoint, self).on_train_epoch_end(trainer, pl_module),
                         again=again)

    def _with_top_k(self, trainer: pl.Trainer, save_top_k: Any, again: bool) -> None:
        """Lightning's top-k save (`save_top_k()`), then `last.ckpt`: a link to the top-k file when one was saved."""
        if self.keep_last and self.dirpath is not None and trainer.global_step > 0:  # the top-k file's saved state
            # names last.ckpt, as last.ckpt's own does: the two files can then be the same bytes
            self.last_model_path = self.format_checkpoint_name({}, self.CHECKPOINT_NAME_LAST)
        before = (set(self.best_k_models), self.best_model_path)
        save_top_k()
        saved = _saved_now(before, self)
        self.write_last(trainer, again=again, same_as=saved)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_last(trainer)


def _saved_now(before: tuple[set[str], str], callback: LightningModelCheckpoint) -> str | None:
    """The top-k file Lightning saved since `before` (its top-k paths and best path then), or None.

    Read from the callback's public state, which every rank updates alike (so all ranks decide alike): a save adds
    its path to `best_k_models` (monitored) or makes it `best_model_path` (no monitor). A save under a name that was
    already there (a fixed `filename`) is not seen: last.ckpt is then written in full, as before.
    """
    new = set(callback.best_k_models) - before[0]
    if len(new) == 1:
        return new.pop()
    if not new and callback.best_model_path and callback.best_model_path != before[1] \
            and callback.best_model_path not in before[0]:
        return callback.best_model_path
    return None


def _publish_as_link(trainer: pl.Trainer, source: str, path: str) -> bool:
    """Make `path` a second name of the single-file checkpoint `source` on rank 0 (every rank waits at a barrier,
    as after a save); False, having done nothing, where that does not apply: the file is written by another plugin
    (`checkpoint_async=true`'s background writer, a user's), a strategy that saves its own way (sharded folders,
    hogwild's snapshot, DiLoCo's outer state), or an object store."""
    from pytorch_lightning.strategies import Strategy

    from litforge.checkpointing.io import AtomicCheckpointIO

    strategy = trainer.strategy
    io = strategy.checkpoint_io
    if type(io) is not AtomicCheckpointIO or type(strategy).save_checkpoint is not Strategy.save_checkpoint \
            or "://" in str(source) or "://" in str(path):
        return False
    if trainer.is_global_zero:
        io.link_checkpoint(source, path)
    strategy.barrier("litforge.last_checkpoint")
    return True


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
