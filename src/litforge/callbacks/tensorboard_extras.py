"""The default run's one TensorBoard callback: epoch throughput, the HParams entry, the model graph and the test-time
images (litforge.callbacks.throughput, .tensorboard, .images), each with its switch in conf/callbacks/default.yaml.

One callback instead of four because Lightning calls every hook on every callback, no-ops included, each inside a
profiler context: each callback fewer saves ~60 Python calls per training step (tests/test_speed.py) without
touching Lightning's dispatch.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.types import STEP_OUTPUT

from litforge.callbacks.images import ClassificationImages, LabelCurves, Normalize
from litforge.callbacks.tensorboard import HParamsSummary, ModelGraph
from litforge.callbacks.throughput import Throughput, set_summary_example
from litforge.core.bounds import Count


class TensorBoardExtras(pl.Callback):
    """Throughput scalars, the HParams entry, the model graph and the test-time images as one callback, each with its
    switch (conf/callbacks/default.yaml's `tensorboard_extras`); the parts behave exactly as their own classes."""

    def __init__(
        self,
        throughput: bool = True,
        hparams: bool = True,
        model_graph: bool = True,
        test_images: bool = True,
        after_test: bool = True,
        max_samples: Count = 32,
        normalize: Normalize = None,
    ) -> None:
        self.throughput = Throughput() if throughput else None
        self.hparams = HParamsSummary(after_test=after_test) if hparams else None
        self.model_graph = ModelGraph() if model_graph else None
        self.test_images = ClassificationImages(max_samples=max_samples, normalize=normalize) if test_images else None
        self.label_curves = LabelCurves() if test_images else None  # multi-label tasks: precision/recall per label

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.throughput is not None and stage == "fit":
            set_summary_example(trainer, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.throughput is not None:
            self.throughput.on_train_start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.throughput is not None:
            self.throughput.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: object, batch_idx: int
    ) -> None:
        if self.throughput is not None:
            self.throughput.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.throughput is not None:
            self.throughput.on_train_epoch_end(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.model_graph is not None:
            self.model_graph.on_train_end(trainer, pl_module)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.hparams is not None:
            self.hparams.on_fit_end(trainer, pl_module)

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.test_images is not None:
            self.test_images.on_test_epoch_start(trainer, pl_module)
        if self.label_curves is not None:
            self.label_curves.on_test_epoch_start(trainer, pl_module)

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Sequence[torch.Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self.test_images is not None:
            self.test_images.on_test_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
        if self.label_curves is not None:
            self.label_curves.on_test_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.test_images is not None:
            self.test_images.on_test_epoch_end(trainer, pl_module)
        if self.label_curves is not None:
            self.label_curves.on_test_epoch_end(trainer, pl_module)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.hparams is not None:
            self.hparams.on_test_end(trainer, pl_module)
