"""Store which code trained the weights in every checkpoint (litforge.provenance writes the full record)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from litforge.provenance import CHECKPOINT_KEY, summary


class ProvenanceRecorder(pl.Callback):
    """Adds `checkpoint["litforge_provenance"]` = {commit, dirty, start} to every checkpoint saved.

    Plain data, so checkpoints still load with `weights_only=True`; `eval.py` prints it. Added by the training job
    itself (not a `callbacks=` option): every run records it.
    """

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = summary(self.record)
