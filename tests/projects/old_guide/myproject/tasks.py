"""Regression: predict numbers from features, with a regression loss and torchmetrics' mean absolute error."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError

from litforge.errors import ConfigError
from litforge.models.factory import build_net
from litforge.tasks.base import LitforgeTask, build_loss

REGRESSION_LOSSES = ("MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss")


class RegressionTask(LitforgeTask):
    """Trains `net` on (features, targets) batches; logs train/loss, {val,test}/loss and {val,test}/mae."""

    data_kind = "tabular"

    def __init__(self, net: dict[str, Any], optimizer: dict[str, Any], num_features: int,
                 feature_names: list[str] | None = None, num_outputs: int = 1,
                 scheduler: dict[str, Any] | None = None, loss: dict[str, Any] | None = None,
                 lr_scaling: str = "none", run_config: dict[str, Any] | None = None) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])  # plain data only: checkpoints load with weights_only=True
        if loss and not str(loss.get("_target_", "")).endswith(REGRESSION_LOSSES):
            raise ConfigError(f"task=regression needs a regression loss, not {loss.get('_target_')}: "
                              "pass loss=mse (experiment=diabetes sets it)")
        self.net = build_net(net, num_features=num_features, num_outputs=num_outputs)
        self.loss_fn = build_loss(loss, nn.MSELoss)
        self.val_mae = MeanAbsoluteError()
        self.test_mae = MeanAbsoluteError()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """The loss of one optimizer step: LitforgeTask.training_step (and steps_per_call) call this."""
        features, targets = batch
        return self.loss_fn(self(features), targets)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        features, targets = batch
        predicted = self(features)
        self.val_mae.update(predicted, targets)
        self.log("val/loss", self.loss_fn(predicted, targets), prog_bar=True, batch_size=len(targets), sync_dist=True)
        self.log("val/mae", self.val_mae, prog_bar=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        features, targets = batch
        predicted = self(features)
        self.test_mae.update(predicted, targets)
        self.log("test/loss", self.loss_fn(predicted, targets), batch_size=len(targets), sync_dist=True)
        self.log("test/mae", self.test_mae)
