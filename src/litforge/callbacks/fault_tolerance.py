"""Callbacks that keep a run's checkpoints trustworthy when training goes wrong or is stopped from outside.

- :class:`StopOnNonFiniteLoss`: a NaN/inf training loss stops the run with the step it happened at, before any
  checkpoint can be written from the poisoned weights (EarlyStopping's `check_finite` only sees the monitored
  validation metric, once per validation).
- :class:`CheckpointOnSignal`: SIGTERM (a scheduler's pre-emption, `kill`, Kubernetes) saves `last.ckpt` at the
  current step, mid-epoch included, before the process exits. Lightning already turns SIGTERM into a
  `SIGTERMException` at the next batch boundary (all ranks together under DDP); this callback adds the save.
  Ctrl+C is deliberately not saved: a KeyboardInterrupt can land between the optimizer step and the loop's step
  counter, and a checkpoint from there would resume one step off. `last.ckpt` from the last epoch end stays.
  On SLURM with auto-requeue, Lightning's own SIGUSR1 handler saves `hpc_ckpt_<n>.ckpt` and requeues the job;
  `resume=auto` finds either file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException

from litforge.errors import TrainingStopped


class StopOnNonFiniteLoss(Callback):
    """Stop training at the first NaN/inf loss, naming the step; never let a checkpoint hold the weights after it.

    Cheap by design: each step only keeps a reference to the (already computed) loss tensor. Every
    `check_every_n_steps` batches, and always before a checkpoint is written or validation starts, the kept losses are
    read in one device->host copy (a sum is NaN/inf when any element is). On a CPU that is a few microseconds; on a
    GPU it is one small wait per check, so raise `check_every_n_steps` (e.g. 50) when a training step takes only a few milliseconds: the
    reported step stays exact, only the stop comes up to N-1 steps later.
    """

    def __init__(self, check_every_n_steps: int = 1) -> None:
        super().__init__()
        self.check_every_n_steps = check_every_n_steps
        self._losses: list[torch.Tensor] = []
        self._where: list[tuple[int, int, int]] = []  # (global step, epoch, batch) of each kept loss

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._where.append((trainer.global_step, trainer.current_epoch, batch_idx))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):  # a skipped step (training_step returned None)
            self._where.pop()
            return
        self._losses.append(loss.detach())
        if len(self._losses) >= self.check_every_n_steps:
            self.check(trainer)

    # checkpoints and validation must never see weights updated from a non-finite loss
    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self.check(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check(trainer)

    def check(self, trainer: pl.Trainer) -> None:
        """One device→host sync for all losses kept since the last check; raise at the first non-finite one."""
        if not self._losses:
            return
        losses, where = self._losses, self._where[: len(self._losses)]
        self._losses, self._where = [], self._where[len(self._losses):]
        # a training step that ran several optimizer steps (steps_per_call > 1) returns one loss per step
        if losses[0].device.type == "cpu":  # nothing to sync with: plain floats are the cheapest check
            values = [t.reshape(-1).tolist() for t in losses]
        else:  # one device->host copy for all kept losses
            flat = torch.cat([t.reshape(-1) for t in losses]).cpu()
            values = [part.tolist() for part in flat.split([t.numel() for t in losses])]
        found = next(((i, j) for i, vs in enumerate(values) for j, v in enumerate(vs) if not math.isfinite(v)), None)
        if found is None:
            return
        first, offset = found
        step, epoch, batch = where[first]
        step += offset
        value = values[first][offset]
        raise TrainingStopped(
            f"training stopped: the loss became {value} at step {step} (epoch {epoch}, batch {batch}); no checkpoint "
            f"was written from that step on. {_last_good(trainer)} Try a lower optimizer.lr, "
            "trainer.gradient_clip_val=1.0, or trainer.precision=32-true"
        )


class CheckpointOnSignal(Callback):
    """On SIGTERM, save the full training state (mid-epoch included) as `last.ckpt`, then let the run end.

    Resuming from it (`resume=<run folder>` or `resume=auto`) continues from the interrupted step: Lightning restores
    the loop position and our in-memory loader skips the batches already trained on.
    """

    def __init__(self, filename: str = "last") -> None:
        super().__init__()
        self.filename = filename
        self.saved_path: str | None = None

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return
        if trainer.sanity_checking or trainer.global_step == 0:
            return  # nothing trained yet: keep whatever checkpoint the run started from
        checkpoint_cb = trainer.checkpoint_callback
        folder = Path(checkpoint_cb.dirpath) if isinstance(checkpoint_cb, ModelCheckpoint) and checkpoint_cb.dirpath \
            else Path(trainer.default_root_dir) / "checkpoints"
        path = str(folder / f"{self.filename}.ckpt")
        if isinstance(checkpoint_cb, ModelCheckpoint):
            checkpoint_cb.last_model_path = path  # part of the saved state, like ModelCheckpoint's own last.ckpt
        trainer.save_checkpoint(path)
        self.saved_path = path


def _last_good(trainer: pl.Trainer) -> str:
    checkpoint_cb = trainer.checkpoint_callback
    last = getattr(checkpoint_cb, "last_model_path", "") or getattr(checkpoint_cb, "best_model_path", "")
    if last and Path(last).exists():
        return f"The last good checkpoint is {last}."
    return "No checkpoint had been written yet."

