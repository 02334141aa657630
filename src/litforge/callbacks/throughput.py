"""Epoch wall time, training throughput and model FLOP utilisation as scalars (`time/epoch_s`,
`time/train_samples_per_s`, `perf/flops_per_sec`, `perf/mfu`, `perf/flops_per_step`)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import RichModelSummary
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.callbacks.tensorboard import example_input
from litforge.core.contracts import net_of
from litforge.runtime.flops import count_step_flops, peak_flops, precision_dtype
from litforge.tasks.classification import ClassificationTask
from litforge.tasks.language_model import LanguageModelTask

log = logging.getLogger(__name__)


class Throughput(pl.Callback):
    """Times each training epoch and counts its samples; logs once per epoch, so the per-step cost is one addition.

    `time/train_samples_per_s` spans the first to the last training batch of the epoch (all ranks together);
    `time/epoch_s` is the whole epoch as the user waits for it, validation included. A run resumed mid-epoch counts
    from the resume; an epoch this process ran no batch of (resumed from its end-of-epoch checkpoint, where Lightning
    skips `on_train_epoch_start`) logs nothing rather than the time since the clock's origin.

    FLOPs: the first training batch's forward and backward through the task's net are counted once
    (litforge.runtime.flops, without side effects; on every rank, since a sharded net's forward is a collective),
    and its time is left out of the epoch's. From then on the FLOPs are samples × FLOPs per sample, so the per-step
    cost stays the addition above; `perf/flops_per_sec` (all ranks) and `perf/mfu` (against the device's peak in the
    trainer's precision) go to the loggers every `log_every_n_steps` batches from host clocks (no device read) and
    with the epoch's scalars into the final metrics. Lightning's ThroughputMonitor is not used: it needs a
    `flops_per_batch` up front, syncs on every batch and logs per step from its own window.
    """

    def __init__(self) -> None:
        self._start = 0.0
        self._last_batch_end = 0.0
        self._samples = 0
        self._counted = False
        self._flops_per_sample = 0.0
        self._flops_per_step = 0
        self._peak: float | None = None
        self._log_every = 50
        self._window_start = 0.0
        self._window_samples = 0
        self._batches = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last_batch_end = time.perf_counter()
        self._samples = 0
        self._log_every = max(1, int(getattr(trainer, "log_every_n_steps", 50) or 50))  # set by a connector, if at all

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = self._last_batch_end = self._window_start = time.perf_counter()
        self._samples = self._window_samples = self._batches = 0

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        self._samples += _batch_size(batch)
        self._last_batch_end = time.perf_counter()
        if not self._counted:
            self._count(trainer, pl_module, batch)
        self._batches += 1
        if self._batches % self._log_every == 0 and self._flops_per_sample:
            self._log_window(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter()
        train_time = self._last_batch_end - self._start
        if not self._samples:
            return
        pl_module.log("time/epoch_s", now - self._start, sync_dist=True, reduce_fx="max")  # the slowest rank's
        if train_time > 0:
            pl_module.log("time/train_samples_per_s", self._samples * trainer.world_size / train_time, sync_dist=True)
            if self._flops_per_sample:
                self._log_perf(trainer, self._perf(self._samples, train_time, trainer.world_size))

    # ---- FLOPs -----------------------------------------------------------------------------------------------------
    def _count(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object) -> None:
        self._counted = True
        began = time.perf_counter()
        forward = net_forward(pl_module, batch)
        samples = _batch_size(batch)
        if forward is None or not samples:
            return
        try:
            flops = count_step_flops(pl_module.net, forward)  # type: ignore[arg-type]
            self._peak = peak_flops(pl_module.device, precision_dtype(str(trainer.precision)))
        except Exception as exc:  # a number on a chart must not end the run
            log.warning("FLOPs per step not counted (%s): no perf/flops_per_sec or perf/mfu", exc)
            return
        finally:
            spent = time.perf_counter() - began
            self._start += spent  # the count is not training time
            self._window_start = self._last_batch_end = time.perf_counter()
            self._window_samples = self._samples  # the first window opens after the counted batch
        self._flops_per_step = flops
        self._flops_per_sample = flops / samples
        if trainer.is_global_zero:
            peak = f"{self._peak:.3g} FLOP/s per device" if self._peak else "unknown for this device"
            log.info("FLOPs per training step (forward + backward, one rank): %.4g; peak %s", flops, peak)

    def _perf(self, samples: int, seconds: float, world_size: int) -> dict[str, float]:
        flops_per_sec = samples * self._flops_per_sample * world_size / seconds
        perf = {"perf/flops_per_sec": flops_per_sec, "perf/flops_per_step": float(self._flops_per_step)}
        if self._peak:
            perf["perf/mfu"] = flops_per_sec / (self._peak * world_size)
        return perf

    def _log_window(self, trainer: pl.Trainer) -> None:
        samples = self._samples - self._window_samples
        seconds = self._last_batch_end - self._window_start
        self._window_start, self._window_samples = self._last_batch_end, self._samples
        if seconds <= 0 or samples <= 0 or not trainer.is_global_zero:
            return
        perf = self._perf(samples, seconds, trainer.world_size)
        for logger in trainer.loggers:
            logger.log_metrics(perf, step=trainer.global_step)

    def _log_perf(self, trainer: pl.Trainer, perf: dict[str, float]) -> None:
        """The epoch's figures to the loggers and into `trainer.callback_metrics` (the final summary, metrics.json,
        the HParams tab) directly: three `self.log` calls would cost ~2,800 Python calls at every epoch boundary
        (tests/test_speed.py pins it) for values that need no reduction across ranks (host clocks, counted once)."""
        metrics = {name: torch.tensor(value, dtype=torch.float64) for name, value in perf.items()}
        trainer.callback_metrics.update(metrics)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(perf, step=trainer.global_step)


def net_forward(pl_module: pl.LightningModule, batch: object) -> Any:
    """The call of the task's plain net on a training batch's inputs, as its training step makes it; None for tasks
    whose step is not one forward of `net` (reinforcement learning, a pipeline's stages)."""
    net = net_of(pl_module)
    if not isinstance(net, torch.nn.Module) or not isinstance(batch, (tuple, list)) or not batch:
        return None
    if isinstance(pl_module, LanguageModelTask):
        doc_ids = batch[2] if pl_module.packed and len(batch) > 2 else None
        return lambda: net(batch[0], doc_ids)
    if isinstance(pl_module, ClassificationTask):
        return lambda: net(batch[0])
    return None


def set_summary_example(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Give the task an `example_input_array` of one sample where it has none, so Lightning's model summary (which
    counts FLOPs only by running that example through the model) prints the net's forward FLOPs instead of 0.

    Left out where that forward would hang: a sharded or meta net (the summary runs its forward on rank 0 alone). A
    compiled net gets one: :class:`EagerModelSummary` runs it eagerly.
    """
    net = net_of(pl_module)
    if pl_module.example_input_array is not None or not isinstance(net, torch.nn.Module):
        return
    if any(p.is_meta or type(p) is not torch.nn.Parameter for p in net.parameters()):
        return
    if trainer.world_size > 1 and not isinstance(trainer.strategy, pl.strategies.DDPStrategy):
        return
    example: torch.Tensor | None
    if isinstance(pl_module, LanguageModelTask):
        example = torch.zeros(1, int(pl_module.hparams["block_size"]), dtype=torch.long)
    else:
        example = example_input(trainer, pl_module)
    if example is not None:
        pl_module.example_input_array = example


class EagerModelSummary(RichModelSummary):
    """Lightning's rich model summary, its FLOP-counting forward run with compiled modules eager
    (`torch.compiler.set_stance`): under `compile=true|blocks` that no-grad forward would compile a graph of its own
    per block shape (beside training's and evaluation's), and a net left without an example printed "Total FLOPs: 0"."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with torch.compiler.set_stance("force_eager"):
            super().on_fit_start(trainer, pl_module)


def _batch_size(batch: object) -> int:
    """Leading dimension of the first tensor in the batch (images, tokens, ...)."""
    while isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    return int(batch.shape[0]) if isinstance(batch, torch.Tensor) and batch.dim() else 0
