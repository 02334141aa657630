"""Callbacks that keep a run's checkpoints trustworthy when training goes wrong or is stopped from outside.

- :class:`StopOnNonFiniteLoss`: a NaN/inf training loss stops the run with the step it happened at, before any
  checkpoint can be written from the poisoned weights (EarlyStopping's `check_finite` only sees the monitored
  validation metric, once per validation).
- :class:`CheckpointOnSignal`: SIGTERM (a scheduler's pre-emption, `kill`, Kubernetes) saves `last.ckpt` at the
  current step, mid-epoch included, before the process exits. Lightning already turns SIGTERM into a
  `SIGTERMException` at the next batch boundary (all ranks together under DDP); this callback adds the save.
  A rank that never reaches that boundary (stuck in a collective) is ended `hang_grace` s after SIGTERM by
  litforge.runtime.watchdog.HangWatchdog, with every thread's stack, exit 143.
  Ctrl+C is deliberately not saved: a KeyboardInterrupt can land between the optimizer step and the loop's step
  counter, and a checkpoint from there would resume one step off. `last.ckpt` from the last epoch end stays.
  A pre-emption signal (`requeue_signal`, SIGUSR1: SLURM's `--signal=USR1@90`, the Hydra submitit launcher
  sends the same) stops the run the same way, saves `last.ckpt`, then requeues the SLURM job from global rank 0.
"""

from __future__ import annotations

import math
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.checkpointing.model_checkpoint import LAST, latest_path, save_latest
from litforge.core.bounds import Count, Positive
from litforge.core.errors import TrainingStopped
from litforge.runtime.compat import StopAgreement, agree_on_sigterm_every, restart_validation_on_resume
from litforge.runtime.host_reads import KeepsLosses, StepLosses, Where, writes_step_metrics
from litforge.runtime.ranks import decision_interval, meets_now
from litforge.runtime.requeue import Requeue, requeue_slurm_job, take_early_signal
from litforge.runtime.watchdog import HangWatchdog, run_log_file


class StopOnNonFiniteLoss(Callback):
    """Stop training at the first NaN/inf loss, naming the step; never let a checkpoint hold the weights after it.

    No host sync of its own in steady state: each step only keeps a reference to the (already computed) loss
    tensor. A litforge task reads its kept losses to the host once per logging step (litforge.runtime.host_reads) and
    this guard checks those host values; for any other LightningModule it reads the losses it kept itself on the
    same steps. `check_every_n_steps` adds a read every N steps (null = the logging steps only), and the losses
    are always read before a checkpoint is written, before validation and at each epoch end. The reported step
    stays exact; only the stop can come up to `trainer.log_every_n_steps - 1` steps later.

    Under DDP/FSDP the stop is a collective decision: every rank takes part in one tiny all-reduce per check (the
    logging steps, checkpoints and validation, never every step), so all ranks raise together instead of the
    others blocking on a rank that stopped (issue 18).
    """

    def __init__(self, check_every_n_steps: Count | None = None) -> None:
        super().__init__()
        self.check_every_n_steps = check_every_n_steps
        self._own = StepLosses()  # losses kept from the step outputs, for modules without `step_losses`
        self._where: Where = (0, 0, 0)
        self._task_kept = -1
        self._steps = 0

    def _losses(self, pl_module: object) -> StepLosses:
        return pl_module.step_losses if isinstance(pl_module, KeepsLosses) else self._own

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self._where = (trainer.global_step, trainer.current_epoch, batch_idx)
        self._task_kept = pl_module.step_losses.kept if isinstance(pl_module, KeepsLosses) else -1

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        if not (isinstance(pl_module, KeepsLosses) and pl_module.step_losses.kept > self._task_kept):  # not kept there
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if not isinstance(loss, torch.Tensor):  # a skipped step (training_step returned None)
                return
            self._own.keep(loss, self._where)
        self._steps += 1
        every = self.check_every_n_steps
        # hogwild: the check is a collective decision, taken only every strategy.decide_every steps
        if (writes_step_metrics(trainer, self._where[0]) or (every and self._steps % every == 0)) and meets_now(
            trainer
        ):
            self.check(trainer, pl_module)

    # checkpoints and validation must never see weights updated from a non-finite loss
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.check(trainer, pl_module)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check(trainer, pl_module)

    def check(self, trainer: pl.Trainer, pl_module: object = None) -> None:
        """Read what is still on the device (one copy), check every host value since the last check, raise at the
        first non-finite one; with several ranks, raise on all of them when any rank found one."""
        found = None
        for losses in {id(x): x for x in (self._losses(pl_module), self._own)}.values():
            losses.read()
            for where, values in losses.take():
                bad = next((j for j, v in enumerate(values) if not math.isfinite(v)), None)
                if bad is not None and found is None:
                    found = (where, bad, values[bad])
        if _distributed():
            if trainer.strategy.reduce_boolean_decision(found is not None, all=False) and found is None:
                raise TrainingStopped(
                    "training stopped: another rank's loss became NaN/inf (its log names the "
                    f"step); no checkpoint was written from that step on. {_last_good(trainer)}"
                )
        if found is None:
            return
        (step, epoch, batch), offset, value = found
        raise TrainingStopped(
            f"training stopped: the loss became {value} at step {step + offset} (epoch {epoch}, batch {batch}); no "
            f"checkpoint was written from that step on. {_last_good(trainer)} Try a lower optimizer.lr, "
            "trainer.gradient_clip_val=1.0, or trainer.precision=32-true"
        )


def _distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


class CheckpointOnSignal(Callback):
    """On SIGTERM, save the full training state (mid-epoch included) as `last.ckpt`, then let the run end.

    Resuming from it (`resume=<run folder>` or `resume=auto`) continues from the interrupted step: Lightning restores
    the loop position and our in-memory loader skips the batches already trained on.

    `hang_grace` (seconds, null = off): a rank that never reaches the next step boundary (blocked in a collective)
    would ignore SIGTERM; from setup to teardown a litforge.runtime.watchdog.HangWatchdog ends such a process that long
    after SIGTERM, with every thread's stack on stderr and in the run's log, exit code 143.

    Under DDP no collective runs per step for this (Lightning broadcasts a SIGTERM flag before every step): each
    rank's handler only notes the signal, and the ranks agree on it with one tiny all-reduce every
    `check_every_n_steps` training batches (null = `trainer.log_every_n_steps`) and at each epoch end, so every rank
    stops and saves at the same batch (litforge.runtime.compat.agree_on_sigterm_every). Schedulers send SIGTERM to every
    rank; one that reaches a single rank stops all of them too.

    SIGTERM during `fit`'s validation stops it after the current validation batch (under DDP the ranks agree every
    `check_every_n_steps` validation batches, which all ranks count alike), not after the whole validation: a long
    one would outlast the grace a scheduler gives before SIGKILL (SLURM's KillWait, 30 s). The checkpoint then
    resumes by running that validation again from its first batch
    (litforge.runtime.compat.restart_validation_on_resume): Lightning would otherwise skip it on resume, and its
    metrics, checkpoint choice and early stopping with it.

    `requeue_signal` (SIGUSR1 by default; null = none) is the pre-emption signal: a scheduler sends it some time
    before it ends the job (SLURM's `--signal=USR1@90`, the submitit launcher's `signal_delay_s`). Its handler only
    notes it, like SIGTERM's: no save, no collective and no `scontrol` inside a signal handler (Lightning's SLURM
    handler saves there, and under DDP hung when another rank sat in a collective). The ranks agree on it at the
    same points as on SIGTERM, all stop at the same batch and save `last.ckpt`; then global rank 0 writes (and
    flushes) the line that says so, with the step, the checkpoint and the job id, and runs `scontrol requeue <job id>`
    once (litforge.runtime.requeue), only inside a SLURM job: Slurm ends the step as soon as the requeue lands, so the
    line comes first. Outside SLURM the run ends
    as after SIGTERM, exit 143 with the resume command. The handler is installed when training starts (after
    Lightning registered its own, so it replaces Lightning's SLURM requeue handler if that one is on) and Lightning
    puts the earlier handler back when `fit` ends; a signal that came earlier, while the job was starting, was noted
    by litforge.runtime.requeue.catch_early and is acted on at the first agreed step.
    """

    def __init__(
        self,
        filename: str = "last",
        hang_grace: Positive | None = 60,
        check_every_n_steps: Count | None = None,
        requeue_signal: Literal["SIGUSR1", "SIGUSR2"] | None = "SIGUSR1",
    ) -> None:
        super().__init__()
        self.filename = filename
        self.saved_path: str | None = None
        self.hang_grace = hang_grace
        self.check_every_n_steps = check_every_n_steps
        self.requeue_signal = requeue_signal
        self.stopped_by = "SIGTERM"  # what ended the run: SIGTERM, or requeue_signal once the ranks agreed on it
        self.requeued: Requeue | None = None  # the requeue attempt of global rank 0 (None: none made)
        self.requeue_agreed = False  # the ranks agreed to requeue (the pre-emption signal), on every rank
        self.watchdog: HangWatchdog | None = None
        self._agree: StopAgreement | None = None
        self._every = 1
        self._validating = False  # inside fit's validation (not the sanity check)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Lightning's connectors set it; Trainer does not declare it
        every = self.check_every_n_steps or max(1, int(trainer.log_every_n_steps or 1))  # type: ignore[attr-defined]
        every = max(every, decision_interval(trainer))  # hogwild: its rare meetings
        self._every = every
        self._agree = agree_on_sigterm_every(trainer, every)
        if self.hang_grace is not None and self.watchdog is None:
            self.watchdog = HangWatchdog(self.hang_grace, log_file=run_log_file())
            self.watchdog.arm()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.watchdog is not None:
            self.watchdog.disarm()  # a grace period already running goes on: after SIGTERM the process must end
            self.watchdog = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after Lightning's register_signal_handlers (which restores the handler found before fit when fit ends)
        if self.requeue_signal and self._agree is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.Signals[self.requeue_signal], self._on_requeue_signal)
            if take_early_signal():  # it came while the job was starting (litforge.runtime.requeue.catch_early)
                self._agree.note(signal.Signals[self.requeue_signal], requeue=True)

    def _on_requeue_signal(self, signum: int, _frame: FrameType | None) -> None:
        """The pre-emption signal's handler: flags only (see the class docstring)."""
        if self._agree is not None:
            self._agree.note(signum, requeue=True)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._agree is not None:
            self._agree()  # every rank is here: a SIGTERM since the last check stops the fit loop on all of them

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validating = trainer.state.fn == "fit" and not trainer.sanity_checking

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: object,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        # Lightning's evaluation loop stops at the next batch once `received_sigterm` is set; under several ranks
        # only an agreement sets it (the same batch on every rank: each validates the same number of batches)
        if self._validating and self._agree is not None and _distributed() and (batch_idx + 1) % self._every == 0:
            self._agree()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validating = False

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return
        requeue = self._agree is not None and self._agree.requeue
        self.requeue_agreed = requeue  # every rank knows; global rank 0 requeues
        if requeue:
            self.stopped_by = str(self.requeue_signal)
        if not (trainer.sanity_checking or trainer.global_step == 0):  # else keep the checkpoint it started from
            self._save(trainer)
        if requeue and trainer.is_global_zero and self.requeued is None:
            saved = (
                f"saved {self.saved_path}"
                if self.saved_path
                else "nothing saved before the first step (the checkpoint it started from, if any, stays)"
            )
            why = f"stopped by {self.stopped_by} at step {trainer.global_step} (epoch {trainer.current_epoch}); {saved}"
            self.requeued = requeue_slurm_job(say=why)  # every rank has saved: the save ends with a barrier

    def _save(self, trainer: pl.Trainer) -> None:
        if self._validating:  # stopped mid-validation: the resumed run validates again, from the first batch
            restart_validation_on_resume(trainer)
        if self.filename == LAST:
            path, _ = save_latest(trainer)  # the run's last.ckpt, its checkpoint callbacks' state naming it
        else:
            checkpoint_cb = trainer.checkpoint_callback
            folder = (
                Path(checkpoint_cb.dirpath)
                if isinstance(checkpoint_cb, ModelCheckpoint) and checkpoint_cb.dirpath
                else Path(trainer.default_root_dir) / "checkpoints"
            )
            path = str(folder / f"{self.filename}.ckpt")
            trainer.save_checkpoint(path)
        self.saved_path = path


def _last_good(trainer: pl.Trainer) -> str:
    checkpoint_cb = trainer.checkpoint_callback
    last = latest_path(trainer) or (checkpoint_cb.best_model_path if isinstance(checkpoint_cb, ModelCheckpoint) else "")
    if last and Path(last).exists():
        return f"The last good checkpoint is {last}."
    return "No checkpoint had been written yet."
