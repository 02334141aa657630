"""Epoch wall time and training throughput as scalars (`time/epoch_s`, `time/train_samples_per_s`)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl
import torch


class Throughput(pl.Callback):
    """Times each training epoch and counts its samples; logs once per epoch, so the per-step cost is one addition.

    `time/train_samples_per_s` spans the first to the last training batch of the epoch (all ranks together);
    `time/epoch_s` is the whole epoch as the user waits for it, validation included. A run resumed mid-epoch counts
    from the resume; an epoch this process ran no batch of (resumed from its end-of-epoch checkpoint, where Lightning
    skips `on_train_epoch_start`) logs nothing rather than the time since the clock's origin.
    """

    def __init__(self) -> None:
        self._start = 0.0
        self._last_batch_end = 0.0
        self._samples = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last_batch_end = time.perf_counter()
        self._samples = 0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last_batch_end = time.perf_counter()
        self._samples = 0

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._samples += _batch_size(batch)
        self._last_batch_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        train_time = self._last_batch_end - self._start
        if not self._samples:
            return
        pl_module.log("time/epoch_s", now - self._start, rank_zero_only=True)
        if train_time > 0:
            pl_module.log(
                "time/train_samples_per_s", self._samples * trainer.world_size / train_time, rank_zero_only=True
            )


def _batch_size(batch: Any) -> int:
    """Leading dimension of the first tensor in the batch (images, tokens, ...)."""
    while isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    return int(batch.shape[0]) if isinstance(batch, torch.Tensor) and batch.dim() else 0
