"""Classification: any image net × any image datamodule, `model=mlp` × rows of features (`data=csv`), or a text
net × labelled texts (`data=text`, one label a row), with torchmetrics accuracy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from litforge.checkpointing.load import load_checkpoint
from litforge.core.bounds import Positive, UnitInterval
from litforge.core.errors import ConfigError
from litforge.models import transfer
from litforge.models.nets import build_net, input_keywords
from litforge.parallel.meta_init import is_meta, shard_like
from litforge.tasks.mixing import build_mixer
from litforge.tasks.task import LitforgeTask, attached_trainer, build_loss

log = logging.getLogger(__name__)

ABSTAIN = -1  # the class index of a sample whose top-class probability is below task.threshold: no class written
TRAIN_ACC_BATCHES = 32  # training steps whose predictions go into one train/acc update (see _keep_train_predictions)


class ClassificationTask(LitforgeTask):
    """Trains `net` on (image, label) or (features, label) batches; logs `{train,val,test}/{loss,acc}`.

    `input_shape` ([C, H, W] for images, [F] for features), `num_classes` and `class_names` come from the datamodule
    (filled in by the training job), so a net config never repeats numbers that the data already knows.
    """

    data_kind = ("image", "features", "tokens")
    # task.threshold: the least top-class probability that gets a class; below it predict writes no class (ABSTAIN,
    # an empty class_name) and eval counts the sample wrong. A decision: eval/predict/export may change it
    decisions = ("threshold",)

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        input_shape: list[int] | None = None,  # images and features; token data gives vocab_size and max_length
        *,
        num_classes: int,
        class_names: list[str] | None = None,
        vocab_size: int | None = None,
        max_length: int | None = None,
        multilabel: bool = False,
        feature_names: list[str] | None = None,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        init_from: str | None = None,
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",
        mix: Literal["none", "mixup", "cutmix"] = "none",
        mix_alpha: Positive = 0.2,
        threshold: UnitInterval = 0.0,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        if num_classes < 2:  # torchmetrics' multiclass metrics would fail with a traceback inside fit
            raise ConfigError(
                f"the data has {num_classes} class{'es' if num_classes != 1 else ''} ({class_names}): a classifier "
                "needs two or more; check the data (data.target for data=csv), or pass task=regression for numbers"
            )
        if multilabel:  # data=text whose rows list several labels each
            raise ConfigError("the data's rows hold sets of labels (multi-label): pass task=multilabel")
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])
        # task.init_from: weights of another run to start from; applied in setup("fit"), so eval/predict (which
        # rebuild the task from a checkpoint that already holds the trained weights) never need that file. Older
        # checkpoints recorded it in their net config (model.init_from)
        self.init_from: str | None = init_from or net.get("init_from")
        self.threshold = threshold
        self.feature_names = feature_names  # features data: the encoded columns, in order (for predict and export)
        shape = input_keywords(input_shape) if input_shape else {"vocab_size": vocab_size, "max_length": max_length}
        self.net = build_net(net, **shape, num_classes=num_classes)
        self.loss_fn: nn.Module = build_loss(loss, nn.CrossEntropyLoss)
        # task.mix: MixUp / CutMix of each training batch (litforge.tasks.mixing); the loss then gets soft targets
        self.mixer = build_mixer(mix, mix_alpha, num_classes, self.loss_fn)
        self.class_names = class_names or [str(i) for i in range(num_classes)]
        # validate_args=False: the argument checks run `torch.unique` on the targets every update, a host sync per
        # training step on a GPU; the datamodule already guarantees labels in [0, num_classes)
        self.train_acc = MulticlassAccuracy(num_classes=num_classes, average="micro", validate_args=False)
        # training predictions wait here (on the device) and reach train_acc in one update per TRAIN_ACC_BATCHES
        self._train_preds: list[tuple[Tensor, Tensor]] = []
        self.val_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        # validate_args=False: test predictions include ABSTAIN, which micro accuracy counts as wrong
        self.test_acc = MulticlassAccuracy(num_classes=num_classes, average="micro", validate_args=False)

    @property
    def backbone(self) -> nn.Module:
        """The net minus its classifier head: what Lightning's `BackboneFinetuning` callback freezes and unfreezes."""
        return transfer.backbone(self.net)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.init_from and not is_meta(self.net):  # a meta net loads in on_net_materialized
            self.load_init_weights(self.init_from)

    def on_net_materialized(self) -> None:
        if self.init_from and attached_trainer(self) is not None and self.trainer.state.fn == "fit":
            self.load_init_weights(self.init_from)

    def load_init_weights(self, path: str) -> None:
        """Start from another run's net: every tensor but the head must fit (a new class count gets a fresh head).

        When the run resumes from `ckpt_path`, Lightning restores that checkpoint afterwards, so it wins.
        """
        checkpoint = load_checkpoint(path)
        prefix = "net."
        weights = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}

        fresh = transfer.load_backbone(self.net, shard_like(self.net, weights), path)  # sharded net: slices
        log.info("Initialised the net from %s%s", path, f" (new head: {', '.join(fresh)})" if fresh else "")

    def forward(self, images: Tensor) -> Tensor:
        return self.net(images)

    def _shared_step(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        images, labels = batch
        logits = self(images)
        return self.loss_fn(logits, labels), logits, labels

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        if self.mixer is not None:  # training batches only: validation and test see the images as they are
            images, soft = self.mixer(*batch)
            logits = self(images)
            # accuracy against the class holding most of each mixed target (the larger share of the two images)
            self._keep_train_predictions(logits, soft.argmax(dim=1))
            return self.loss_fn(logits, soft)
        loss, logits, labels = self._shared_step(batch)
        self._keep_train_predictions(logits, labels)
        return loss

    def _keep_train_predictions(self, logits: Tensor, labels: Tensor) -> None:
        """Keep this step's predicted classes for train/acc; update the metric once per TRAIN_ACC_BATCHES steps.

        A torchmetrics update costs ~25 Python calls and a few small kernels per call, whatever its size: ~3 % of a
        digits-MLP step when done every step. Micro-averaged accuracy over the concatenated predictions is the same
        number, so the updates are batched (the argmax is one kernel; nothing is read to the host).
        """
        self._train_preds.append((logits.detach().argmax(dim=-1), labels))
        if len(self._train_preds) >= TRAIN_ACC_BATCHES:
            self.flush_train_predictions()

    def flush_train_predictions(self) -> None:
        """Update train/acc with the predictions kept so far (done at every epoch end)."""
        if self._train_preds:
            preds, labels = zip(*self._train_preds, strict=True)
            self._train_preds = []
            self.train_acc.update(torch.cat(preds), torch.cat(labels))

    def on_train_epoch_end(self) -> None:
        # the epoch's accuracy, logged once per epoch (what logging the metric object with on_epoch=True did per step)
        self.flush_train_predictions()
        if self.train_acc.update_called:  # the metric object: torchmetrics syncs its state across ranks in compute(),
            # and Lightning resets it; a `sync_dist` all-reduce of the computed value would wait forever under
            # strategy=pipeline, where only the last stage's ranks have predictions
            self.log("train/acc", self.train_acc, prog_bar=True)
        super().on_train_epoch_end()

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        loss, logits, labels = self._shared_step(batch)
        self.val_acc.update(logits, labels)
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(labels), sync_dist=True)
        self.log("val/acc", self.val_acc, on_epoch=True, prog_bar=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        loss, logits, labels = self._shared_step(batch)
        predicted, _ = self.decide(logits)
        self.test_acc.update(predicted, labels)
        self.log("test/loss", loss, on_epoch=True, batch_size=len(labels), sync_dist=True)
        self.log("test/acc", self.test_acc, on_epoch=True)
        if self.threshold > 0:  # the share of samples that get a class at this threshold
            answered = (predicted != ABSTAIN).float().mean()
            self.log("test/coverage", answered, on_epoch=True, batch_size=len(labels), sync_dist=True)

    def decide(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(class index per sample, or ABSTAIN below `threshold`; its top-class probability)."""
        confidence, predicted = torch.softmax(logits.float(), dim=-1).max(dim=-1)
        return predicted.masked_fill(confidence < self.threshold, ABSTAIN), confidence

    def predict_step(self, batch: Tensor | Sequence[Tensor], batch_idx: int) -> dict[str, Tensor]:
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        predicted, confidence = self.decide(self(images))
        return {"predicted": predicted, "confidence": confidence}
