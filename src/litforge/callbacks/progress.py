"""Lightning's Rich progress bar, doing its per-batch work only when Rich is about to repaint."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import RichProgressBar as LightningRichProgressBar
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.core.bounds import NonNegativeInt


class RichProgressBar(LightningRichProgressBar):
    """`RichProgressBar` (same arguments) that updates the training bar at most `refresh_rate` times a second.

    Lightning's bar, after every training batch, moves its Rich task and re-reads every progress-bar metric
    (`trainer.progress_bar_metrics` converts each logged value to a float): ~115 Python calls per batch on the
    digits MLP, 5-8 % of its whole step, although Rich repaints only `refresh_rate` times a second (Lightning 2.6's
    `refresh_rate` is repaints per second, not batches). This bar does that work only when a repaint is due and on
    the epoch's last batch, so what is on screen at each repaint, and at the end of each epoch, is what Lightning's
    bar would show. Validation, test and predict bars are Lightning's. Upstream Lightning has no option for it.
    """

    def __init__(self, refresh_rate: NonNegativeInt = 1, leave: bool = False, **kwargs: Any) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=leave, **kwargs)  # refresh_rate 0 = hidden
        self._next_train_update = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._next_train_update = 0.0  # the first batch of each epoch draws

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        now = time.monotonic()
        if now < self._next_train_update and batch_idx + 1 < self.total_train_batches:
            return
        if self.refresh_rate > 0:
            self._next_train_update = now + 1.0 / self.refresh_rate
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
