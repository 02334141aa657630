"""Test-time pictures for classifiers: a confusion matrix and a grid of test samples with predicted vs true labels;
for multi-label tasks, each label's precision/recall curve.

Computed from one extra forward pass per test batch (test time only, never during training), with torchmetrics'
confusion matrix (synchronised across processes) and matplotlib figures sent to TensorBoard's Images tab.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Literal

import matplotlib.pyplot as plt
import pytorch_lightning as pl
import torch
from matplotlib.figure import Figure
from pydantic import Field
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torchmetrics.classification import MulticlassConfusionMatrix, MultilabelPrecisionRecallCurve

from litforge.callbacks.tensorboard import tensorboard_loggers
from litforge.core.bounds import Count
from litforge.core.contracts import DataModule, PredictTask
from litforge.tasks.multilabel import MultiLabelTask

# confusion-matrix cells: null = counts | true | pred | all (`normalize=true` arrives as a YAML bool)
Normalize = Annotated[Literal[True, "true", "pred", "all"] | None, Field(description="true, pred, all or null")]


class ClassificationImages(pl.Callback):
    """`test/confusion_matrix` and `test/predictions` images; a no-op for tasks that are not image classifiers."""

    def __init__(self, max_samples: Count = 32, normalize: Normalize = None) -> None:
        self.max_samples = max_samples
        # confusion matrix normalisation: null (counts) | true | pred | all; `normalize=true` arrives as a YAML bool
        self.normalize: Literal["true", "pred", "all"] | None = "true" if normalize is True else normalize
        self._confusion: MulticlassConfusionMatrix | None = None
        self._samples: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def _active(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        return (
            isinstance(datamodule := trainer.datamodule, DataModule)  # type: ignore[attr-defined]
            and datamodule.kind == "image"  # table rows have no images
            and bool(class_names(pl_module))
            and any(True for _ in tensorboard_loggers(trainer))
        )

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._samples = []
        self._confusion = None
        if self._active(trainer, pl_module):
            self._confusion = MulticlassConfusionMatrix(
                num_classes=len(class_names(pl_module)), normalize=self.normalize
            ).to(pl_module.device)

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Sequence[torch.Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._confusion is None:
            return
        images, labels = batch[0], batch[1]
        with torch.no_grad():
            predicted = pl_module(images).argmax(dim=-1)
        self._confusion.update(predicted, labels)
        kept = sum(len(s[0]) for s in self._samples)
        if kept < self.max_samples:
            n = self.max_samples - kept
            self._samples.append((images[:n].detach().float().cpu(), predicted[:n].cpu(), labels[:n].cpu()))

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._confusion is None:
            return
        confusion = self._confusion.compute()  # all ranks take part in the sync
        if not trainer.is_global_zero:
            return
        names = class_names(pl_module)
        fig, _ = self._confusion.plot(val=confusion.cpu(), labels=names if len(names) <= 30 else None)
        fig.set_size_inches(max(4.0, 0.5 * len(names) + 2), max(4.0, 0.5 * len(names) + 2))
        figures = {"test/confusion_matrix": fig}
        if self._samples:
            images, predicted, labels = (torch.cat(parts) for parts in zip(*self._samples, strict=True))
            figures["test/predictions"] = prediction_grid(images, predicted, labels, names)
        for logger in tensorboard_loggers(trainer):
            for tag, figure in figures.items():
                logger.experiment.add_figure(tag, figure, global_step=trainer.global_step, close=False)
            logger.experiment.flush()

        for figure in figures.values():
            plt.close(figure)
        self._confusion = None


def class_names(pl_module: pl.LightningModule) -> list[str]:
    """The task's class names (image classifiers keep them as a plain attribute, a hyperparameter)."""
    return list(pl_module.class_names or ()) if isinstance(pl_module, PredictTask) else []


def prediction_grid(
    images: torch.Tensor, predicted: torch.Tensor, labels: torch.Tensor, class_names: list[str]
) -> Figure:
    """A grid of images titled `predicted / true`, green when right and red when wrong."""
    n = len(images)
    cols = min(8, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(1.6 * cols, 1.8 * rows))
    for i in range(n):
        ax = fig.add_subplot(rows, cols, i + 1)
        image = images[i]
        image = (image - image.min()) / (image.max() - image.min()).clamp_min(1e-8)  # normalised → [0, 1]
        if image.shape[0] == 1:
            ax.imshow(image[0].numpy(), cmap="gray")
        else:
            ax.imshow(image[:3].permute(1, 2, 0).numpy())
        right = bool(predicted[i] == labels[i])
        ax.set_title(
            f"{class_names[predicted[i]]} / {class_names[labels[i]]}", fontsize=8, color="green" if right else "red"
        )
        ax.axis("off")
    fig.suptitle("predicted / true", fontsize=9)
    fig.tight_layout()
    return fig


class LabelCurves(pl.Callback):
    """`test/precision_recall`: each label's precision/recall curve over the test split, its operating point (the
    task's threshold) marked; multi-label tasks only (torchmetrics' curve, synchronised across processes)."""

    def __init__(self) -> None:
        self._curve: MultilabelPrecisionRecallCurve | None = None

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._curve = None
        if isinstance(pl_module, MultiLabelTask) and any(True for _ in tensorboard_loggers(trainer)):
            self._curve = MultilabelPrecisionRecallCurve(pl_module.num_classes, thresholds=101).to(pl_module.device)

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Sequence[torch.Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._curve is not None and isinstance(pl_module, MultiLabelTask):
            with torch.no_grad():
                self._curve.update(torch.sigmoid(pl_module(batch[0])), pl_module.multi_hot(batch[1]).int())

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._curve is None or not isinstance(pl_module, MultiLabelTask):
            return
        precision, recall, grid = self._curve.compute()  # all ranks take part in the sync
        self._curve = None
        assert isinstance(precision, torch.Tensor) and isinstance(recall, torch.Tensor)  # binned: one tensor each
        assert isinstance(grid, torch.Tensor)
        if not trainer.is_global_zero:
            return
        fig = Figure(figsize=(5, 4.5))
        ax = fig.add_subplot()
        for i, (name, limit) in enumerate(zip(pl_module.class_names, pl_module.thresholds().tolist(), strict=True)):
            line = ax.plot(recall[i].cpu(), precision[i].cpu(), label=name)[0]
            at = int(torch.searchsorted(grid.cpu(), torch.tensor(limit)).clamp(max=len(grid) - 1))
            ax.plot(float(recall[i, at]), float(precision[i, at]), "o", color=line.get_color())
        ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1.02), ylim=(0, 1.02), title="test: o = threshold")
        ax.legend(fontsize=8, loc="lower left")
        for logger in tensorboard_loggers(trainer):
            logger.experiment.add_figure("test/precision_recall", fig, global_step=trainer.global_step)
