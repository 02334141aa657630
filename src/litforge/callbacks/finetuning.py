"""Lightning's BackboneFinetuning, refusing the one LR schedule it cannot work with."""

from __future__ import annotations

from typing import Annotated, Any

import pytorch_lightning as pl
from pydantic import Field
from pytorch_lightning.callbacks import BackboneFinetuning as _BackboneFinetuning
from torch.optim.lr_scheduler import OneCycleLR

from litforge.core.bounds import NonNegativeInt
from litforge.core.errors import ConfigError


class BackboneFinetuning(_BackboneFinetuning):
    """`pytorch_lightning.callbacks.BackboneFinetuning`; fails fast with `scheduler=onecycle`.

    Unfreezing adds the backbone as a new optimizer param group mid-run. OneCycleLR stores per-group keys
    (`max_lr`, `initial_lr`, ...) at construction and raises `KeyError: 'max_lr'` at its next step on the new group;
    cosine/step/plateau/none leave the new group at the lr the callback sets. Measured in tests/test_transfer.py.
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: NonNegativeInt = 10,
        backbone_initial_ratio_lr: Annotated[float, Field(gt=0, le=1)] = 0.1,  # backbone lr = head lr x this
        should_align: bool = True,
        train_bn: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            unfreeze_backbone_at_epoch=unfreeze_backbone_at_epoch,
            backbone_initial_ratio_lr=backbone_initial_ratio_lr,
            should_align=should_align,
            train_bn=train_bn,
            **kwargs,
        )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for config in trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, OneCycleLR):
                raise ConfigError(
                    "callbacks.finetune cannot be combined with scheduler=onecycle (OneCycleLR cannot "
                    "schedule the backbone's param group added at unfreeze): use scheduler=cosine, "
                    "step or none"
                )
        super().on_fit_start(trainer, pl_module)
