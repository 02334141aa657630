"""A training run's callbacks, in one place, and its fit: ended by a signal, one line saying how the run continues."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, LearningRateMonitor, ModelSummary, ProgressBar
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities.exceptions import SIGTERMException

from litforge.callbacks.fault_tolerance import CheckpointOnSignal
from litforge.callbacks.provenance import ProvenanceRecorder
from litforge.callbacks.time_limit import clock_callbacks
from litforge.checkpointing.resume import run_checkpoint
from litforge.config.settings import Train
from litforge.core.errors import TrainingStopped
from litforge.runtime.requeue import slurm_job_id


def training_callbacks(
    configured: list[Callback],
    trainer_kwargs: Mapping[str, Any],
    loggers: list[Logger],
    record: dict[str, Any],
    settings: Train,
    checkpoint_dir: Path,
) -> list[Callback]:
    """Every callback a training run gets: the `callbacks` group as configured, less what a trainer switch turned off
    (progress bar, model summary, logger: the switch wins, not clashes), the clock's `checkpoint_every` / `time_limit`
    saves, and the provenance recorder (every checkpoint names the commit that trained it; eval.py reports it)."""
    drop: tuple[type, ...] = () if loggers else (LearningRateMonitor,)
    if trainer_kwargs.get("enable_progress_bar") is False:
        drop += (ProgressBar,)
    if trainer_kwargs.get("enable_model_summary") is False:
        drop += (ModelSummary,)
    callbacks = [cb for cb in configured if not (drop and isinstance(cb, drop))]
    callbacks += clock_callbacks(settings.checkpoint_every, settings.time_limit, checkpoint_dir)
    callbacks.append(ProvenanceRecorder(record))
    return callbacks


def fit_or_stop(
    trainer: pl.Trainer,
    task: pl.LightningModule,
    datamodule: pl.LightningDataModule | None,
    ckpt_path: str | None,
    output_dir: Path,
) -> None:
    """`trainer.fit`; SIGTERM (after the on-signal checkpoint is saved) ends the run with how to resume it."""
    where = "at step {} (epoch {})"
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    except SIGTERMException:
        callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector, undeclared
        on_signal = next((cb for cb in callbacks if isinstance(cb, CheckpointOnSignal)), None)
        saved = on_signal.saved_path if on_signal is not None else None
        by = on_signal.stopped_by if on_signal is not None else "SIGTERM"
        requeued = on_signal.requeued if on_signal is not None else None
        resume_hint = f"Continue with: python train.py resume={output_dir}"
        if requeued is not None and requeued.done:
            then = f"requeued SLURM job {requeued.job_id} (scontrol requeue): it continues from that checkpoint"
        elif on_signal is not None and on_signal.requeue_agreed and slurm_job_id() and not trainer.is_global_zero:
            then = f"global rank 0 requeues SLURM job {slurm_job_id()}: it continues from that checkpoint"
        elif requeued is not None and requeued.job_id is not None:
            then = f"requeueing SLURM job {requeued.job_id} failed ({requeued.problem}). {resume_hint}"
        else:
            then = resume_hint
        raise TrainingStopped(
            f"stopped by {by} {where.format(trainer.global_step, trainer.current_epoch)}; "
            + (
                f"saved {saved}. {then}" if saved else "no checkpoint was saved (enable callbacks.checkpoint_on_signal)"
            ),
            exit_code=143,  # 128 + SIGTERM, what a shell reports for a terminated process: resumable
        ) from None
    except SystemExit:  # Ctrl-C: Lightning tears the run down, then exits (pytorch_lightning/trainer/call.py)
        if not trainer.interrupted:
            raise
        last = run_checkpoint(output_dir)  # no save at Ctrl-C: the newest checkpoint written before it
        raise TrainingStopped(
            f"stopped by Ctrl-C {where.format(trainer.global_step, trainer.current_epoch)}; "
            + (
                f"the last checkpoint is {last}. Continue from it with: python train.py resume={output_dir}"
                if last
                else "no checkpoint was written yet (one is written at each epoch end, or every checkpoint_every)"
            ),
            exit_code=130,  # 128 + SIGINT
        ) from None
