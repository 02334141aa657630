"""Store which code trained the weights, and which tracker runs record them, in every checkpoint.

litforge.records.provenance writes the full record to the run folder; a checkpoint carries the summary (commit, dirty
flag, start) and the tracker run ids (`{"mlflow": <run id>}`), so `eval.py` can name the commit and `resume=auto` can
continue the same MLflow run (litforge.records.tracking.continue_runs).
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from litforge.core.contracts import Tracker
from litforge.records.provenance import CHECKPOINT_KEY, summary


class ProvenanceRecorder(pl.Callback):
    """Adds `checkpoint["litforge_provenance"]` = {commit, dirty, start, tracker_runs} to every checkpoint saved.

    Plain data, so checkpoints still load with `weights_only=True`. Added by the training job itself (not a
    `callbacks=` option): every run records it.
    """

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        runs = {lg.tracker: str(lg.version) for lg in trainer.loggers if isinstance(lg, Tracker) and lg.version}
        checkpoint[CHECKPOINT_KEY] = {**summary(self.record), "tracker_runs": runs}
