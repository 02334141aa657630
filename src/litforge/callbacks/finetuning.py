"""Lightning's BackboneFinetuning, refusing the one LR schedule it cannot work with, and saying when it unfreezes."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import pytorch_lightning as pl
from pydantic import Field
from pytorch_lightning.callbacks import BackboneFinetuning as _BackboneFinetuning
from torch.optim import Optimizer
from torch.optim.lr_scheduler import OneCycleLR

from litforge.core.bounds import NonNegativeInt
from litforge.core.errors import ConfigError

log = logging.getLogger(__name__)


class BackboneFinetuning(_BackboneFinetuning):
    """`pytorch_lightning.callbacks.BackboneFinetuning`; fails fast with `scheduler=onecycle`.

    Unfreezing adds the backbone as a new optimizer param group mid-run. OneCycleLR stores per-group keys
    (`max_lr`, `initial_lr`, ...) at construction and raises `KeyError: 'max_lr'` at its next step on the new group;
    cosine/step/plateau/none leave the new group at the lr the callback sets. Measured in tests/test_transfer.py.

    At the unfreeze it logs one line, and adds the backbone's parameters that the optimizer does not hold yet as the
    new group: with `train_bn=true` its BatchNorm layers trained from the start, in the head's group. (Lightning's
    own unfreeze finds those by value, `torch.equal`, and warns "params to be frozen already exist within another
    group" on every such run.)
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

    def finetune_function(self, pl_module: pl.LightningModule, epoch: int, optimizer: Optimizer) -> None:
        if epoch != self.unfreeze_backbone_at_epoch:
            return super().finetune_function(pl_module, epoch, optimizer)
        head_lr = optimizer.param_groups[0]["lr"]
        initial = self.backbone_initial_lr
        self.previous_backbone_lr = head_lr * self.backbone_initial_ratio_lr if initial is None else initial
        self.make_trainable(pl_module.backbone)
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = [p for p in self.filter_params(pl_module.backbone, self.train_bn) if id(p) not in held]
        optimizer.add_param_group({"params": params, "lr": self.previous_backbone_lr})
        log.info(
            "epoch %d: the backbone is unfrozen: %d of its tensors join the optimizer at lr %.3g (the head's: %.3g)",
            epoch, len(params), self.previous_backbone_lr, head_lr,
        )  # fmt: skip
