"""Restart "which epoch is best" when a compression callback changes the model mid-run.

After pruning reaches its final sparsity, or QAT starts fake-quantizing, earlier epochs describe another model:
the best checkpoint (the one tested) and early stopping must only compare epochs of the compressed model.
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

log = logging.getLogger(__name__)


def restart_selection(trainer: pl.Trainer, reason: str) -> None:
    """Forget the best score of ModelCheckpoint / EarlyStopping: only epochs from now on compete."""
    # Lightning's connectors set it; Trainer does not declare it
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, ModelCheckpoint) and callback.monitor:
            worst = torch.tensor(float("inf") if callback.mode == "min" else -float("inf"))
            callback.best_k_models = {}
            callback.kth_best_model_path = ""
            callback.kth_value = worst
            callback.best_model_score = None
            callback.best_model_path = ""
        elif isinstance(callback, EarlyStopping):
            callback.wait_count = 0
            callback.best_score = torch.tensor(torch.inf if callback.monitor_op == torch.lt else -torch.inf)
    log.info("%s: best-checkpoint selection and early stopping restart now (earlier checkpoints stay on disk)", reason)
