"""A training run's checkpoints: the one it starts from (litforge.checkpointing.resume decided which; checked here to
fit the run), the best one it tests at its end, and what a configuration without validation will not give."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig
from pytorch_lightning.callbacks import ModelCheckpoint

from litforge.checkpointing.load import load_checkpoint, recorded_task_class
from litforge.checkpointing.model_checkpoint import latest_path
from litforge.checkpointing.resume import Resume, check_continues
from litforge.core.instantiate import to_plain
from litforge.records.metrics import scalar_metrics
from litforge.records.provenance import CHECKPOINT_KEY

if TYPE_CHECKING:
    import pytorch_lightning as pl

log = logging.getLogger(__name__)


def starting_checkpoint(decided: Resume, task_cls: type, net_cfg: DictConfig) -> tuple[str | None, dict[str, str]]:
    """The checkpoint `fit` starts from (None: from scratch), loaded once to refuse one that cannot fit the task
    class and the net config (`model=`) of this run, and the tracker runs it continues ({tracker name: run id})."""
    if decided.checkpoint is None:
        if decided.asked:
            log.info("resume=%s: no interrupted run found, starting a new one", decided.asked)
        return None, {}
    log.info("Resuming from %s", decided.checkpoint)
    checkpoint = load_checkpoint(decided.checkpoint)
    check_resumable(checkpoint, decided.checkpoint, task_cls, to_plain(net_cfg))
    return decided.checkpoint, (checkpoint.get(CHECKPOINT_KEY) or {}).get("tracker_runs") or {}


def check_resumable(checkpoint: dict[str, Any], path: str, task_cls: type, net: dict[str, Any]) -> None:
    """A resumed run must train the same task and net (`net`: this run's plain net config) as the checkpoint, or the
    weights cannot fit. Compared by name: nothing the checkpoint names is imported (the command line's check,
    litforge.checkpointing.resume.check_early, asked the same of the checkpoint's metadata)."""
    check_continues(
        path,
        recorded_task_class(checkpoint, path),
        f"{task_cls.__module__}.{task_cls.__qualname__}",
        checkpoint.get("hyper_parameters", {}).get("net"),
        net,
    )


def run_notes(trainer: Mapping[str, Any], data: Mapping[str, Any], tested: bool) -> list[str]:
    """What a valid training config (its `trainer` and `data` groups) will not do although a user may expect it (no
    validation at all: no best checkpoint); `tested`: `test_after_training`."""
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if trainer.get("limit_val_batches") == 0:
        why = "trainer.limit_val_batches=0"
    elif data.get("val_fraction") == 0:
        why = "data.val_fraction=0"
    elif isinstance(every, int) and isinstance(epochs, int) and 0 < epochs < every and not trainer.get("fast_dev_run"):
        why = f"trainer.check_val_every_n_epoch={every} > trainer.max_epochs={epochs}"
    else:
        return []
    return [
        f"no validation in this run ({why}): no best checkpoint, no early stopping and no objective value; the last "
        f"weights are saved{' and tested' if tested else ''}"
    ]


def test_best_checkpoint(
    trainer: pl.Trainer, task: pl.LightningModule, datamodule: pl.LightningDataModule, *, run: bool
) -> dict[str, Any]:
    """Test the best checkpoint after a fit that was not interrupted; the metrics and the checkpoints it left."""
    metrics = scalar_metrics(trainer.callback_metrics)
    picker = trainer.checkpoint_callback if isinstance(trainer.checkpoint_callback, ModelCheckpoint) else None
    best = (picker.best_model_path if picker else "") or None
    last = latest_path(trainer)  # before test(): restoring the best checkpoint resets the callback's state
    tested = None
    if run and not trainer.interrupted:
        trainer.test(task, datamodule=datamodule, ckpt_path=best if best else None, verbose=False)
        metrics.update(scalar_metrics(trainer.callback_metrics))
        monitor = picker.monitor if picker else None
        tested = (
            (f"the best checkpoint by {monitor}" if monitor else "the last checkpoint (none is picked by a metric)")
            if best
            else "the last weights, in memory (no checkpoint was written: trainer.fast_dev_run writes none)"
            if monitor in metrics  # validated, yet nothing written
            else f"the last weights (no {monitor or 'monitored metric'} was logged before training ended, so there "
            "is no best checkpoint: validate sooner, e.g. trainer.val_check_interval=<steps>)"
        )
    return {
        "metrics": metrics,
        "best_checkpoint": best,
        "last_checkpoint": last,
        "interrupted": bool(trainer.interrupted),
        "tested": tested,
    }
