"""Regression: predict one or more numbers per sample (`task=regression`), with torchmetrics MAE and R².

The net learns standardised targets, `(y - mean) / std` with the training split's statistics (the datamodule's
`target_mean`/`target_std`), so one learning rate suits targets in the hundreds as in the thousandths; the loss
(MSE by default, `loss=huber` or `loss=l1`) is on that scale, and MAE and R² are reported in the target's own units.
`forward` returns the target's own units too: predict and export need no statistics of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MetricCollection, R2Score

from litforge.models.nets import build_net, input_keywords
from litforge.tasks.task import LitforgeTask, build_loss


class RegressionTask(LitforgeTask):
    """Trains `net` on (input, target) batches, targets of shape (batch, num_targets); logs `{split}/loss` (on the
    standardised scale) and `{val,test}/{mae,r2}` (in the target's units)."""

    data_kind = ("features", "image")

    target_mean: Tensor  # buffers (registered in __init__): they move with the module and are saved with it
    target_std: Tensor

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        input_shape: list[int],
        num_targets: int,
        target_names: list[str] | None = None,
        target_mean: list[float] | None = None,
        target_std: list[float] | None = None,
        feature_names: list[str] | None = None,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])
        self.target_names = target_names or [f"target_{i}" for i in range(num_targets)]
        self.feature_names = feature_names
        self.net = build_net(net, **input_keywords(input_shape), num_targets=num_targets)
        self.loss_fn: nn.Module = build_loss(loss, nn.MSELoss)
        self.register_buffer("target_mean", torch.tensor(target_mean or [0.0] * num_targets).view(1, -1))
        self.register_buffer("target_std", torch.tensor(target_std or [1.0] * num_targets).view(1, -1))
        metrics = MetricCollection({"mae": MeanAbsoluteError(), "r2": R2Score(multioutput="uniform_average")})
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")

    def forward(self, inputs: Tensor) -> Tensor:
        """Predictions in the target's own units."""
        return self.net(inputs) * self.target_std + self.target_mean

    def _standardized(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        inputs, targets = batch
        return self.net(inputs), (targets.float().view(len(targets), -1) - self.target_mean) / self.target_std

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        outputs, targets = self._standardized(batch)
        return self.loss_fn(outputs, targets)

    def _evaluate(self, batch: tuple[Tensor, Tensor], split: str, metrics: MetricCollection) -> None:
        outputs, targets = self._standardized(batch)
        loss = self.loss_fn(outputs, targets)
        scale = (self.target_std, self.target_mean)
        metrics.update(outputs * scale[0] + scale[1], targets * scale[0] + scale[1])
        self.log(f"{split}/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(targets), sync_dist=True)
        self.log_dict(metrics, on_epoch=True, prog_bar=split == "val")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)

    def deployable_net(self) -> nn.Module:
        """The net with its outputs in the target's units: what export.py converts (no statistics left to apply)."""
        return Rescaled(self.net, self.target_mean, self.target_std)

    def predict_step(self, batch: Tensor | Sequence[Tensor], batch_idx: int) -> dict[str, Tensor]:
        inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
        return {"predicted": self(inputs).float()}


class Rescaled(nn.Module):
    """`net(x) * std + mean`: a regressor's outputs in the target's own units, as one module to export."""

    def __init__(self, net: nn.Module, mean: Tensor, std: Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("std", std.detach().clone())

    def forward(self, inputs: Tensor) -> Tensor:
        return self.net(inputs) * self.std + self.mean
