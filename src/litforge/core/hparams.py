"""What the loggers record as a module's hyperparameters: their values when fit starts, not when `__init__` ran.

Lightning's loggers write `hparams_initial` (hparams.yaml, MLflow params, the HParams tab), a copy taken by
`save_hyperparameters` in `__init__`. litforge's finders (`tune=lr_find`, `tune=batch_size`) change `optimizer.lr` or
`data.batch_size` after construction and before fit; overriding the public `hparams_initial` property keeps the
record equal to what trained the weights, without writing Lightning's private copy.
"""

from __future__ import annotations

import copy
from typing import Any


class HparamsAtFitStart:
    """Mixin for a LightningModule or LightningDataModule (put it first among the bases)."""

    hparams: Any

    @property
    def hparams_initial(self) -> Any:
        """A copy of `hparams` as they are now (Lightning logs it once, at fit start)."""
        hparams = self.hparams
        return type(hparams)(copy.deepcopy(dict(hparams)))
