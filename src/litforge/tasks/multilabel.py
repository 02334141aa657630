"""Multi-label classification (`task=multilabel`): any number of labels per sample, one yes/no logit each.

Hugging Face's `multi_label_classification` problem type: BCE-with-logits (`loss=bce`), a sigmoid per label, and a
decision threshold per label. Scores are torchmetrics' multilabel F1 and average precision, per label
(`val/f1_<label>`, `test/ap_<label>`) and macro-averaged (`val/f1`, the objective; `val/ap`).

`task.threshold` is a decision (eval, predict and export may change it on a trained checkpoint): one probability
for every label, a list with one per label, or `auto`, the per-label threshold that scores the best F1 on the
validation split, fitted after every validation and recorded in the hyperparameters (`fitted_threshold`) so each
checkpoint carries the one that suits its own weights.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import CatMetric
from torchmetrics.functional.classification import (
    multilabel_average_precision,
    multilabel_f1_score,
    multilabel_precision_recall_curve,
)

from litforge.core.bounds import UnitInterval
from litforge.core.errors import ConfigError
from litforge.models.nets import build_net
from litforge.tasks.task import LitforgeTask, attached_trainer, build_loss

log = logging.getLogger(__name__)

# the thresholds task.threshold=auto chooses among, nearest 0.5 first (an equal F1 keeps the more neutral one)
CANDIDATES = sorted((round(0.05 * i, 2) for i in range(1, 20)), key=lambda t: (abs(t - 0.5), t))


def best_thresholds(probabilities: Tensor, targets: Tensor) -> list[float]:
    """Per label, the candidate threshold with the best F1 on (`probabilities`, `targets`) [N, K]."""
    grid = torch.tensor(CANDIDATES, device=probabilities.device)
    precision, recall, _ = multilabel_precision_recall_curve(
        probabilities, targets.int(), targets.shape[1], thresholds=grid
    )
    assert isinstance(precision, Tensor) and isinstance(recall, Tensor)  # tensors, the thresholds being given
    f1 = (2 * precision * recall / (precision + recall)).nan_to_num(0.0)[:, :-1]  # [K, candidates]
    return [CANDIDATES[int(i)] for i in f1.argmax(dim=1)]


class MultiLabelTask(LitforgeTask):
    """Trains `net` on (token ids, multi-hot targets) batches of labelled texts (`data=text`); single-label data
    trains too, each target being a set of one."""

    data_kind = "tokens"
    decisions = ("threshold",)
    class_names: list[str]

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        vocab_size: int,
        num_classes: int,
        max_length: int | None = None,
        class_names: list[str] | None = None,
        multilabel: bool = True,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        threshold: UnitInterval | list[UnitInterval] | Literal["auto"] = 0.5,
        fitted_threshold: list[float] | None = None,  # what threshold=auto picked on validation (set by training)
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])
        self.num_classes = num_classes
        self.class_names = class_names or [str(i) for i in range(num_classes)]
        self.threshold, self.fitted_threshold = threshold, fitted_threshold
        self.thresholds()  # a list of the wrong length is refused now
        self.net = build_net(net, vocab_size=vocab_size, max_length=max_length, num_classes=num_classes)
        self.loss_fn: nn.Module = build_loss(loss, nn.BCEWithLogitsLoss)
        # each evaluation's probabilities and targets, gathered over the processes (torchmetrics syncs them): the
        # scores and the auto threshold are computed once per epoch from the whole split
        self.kept = nn.ModuleDict({f"{split}_{what}": CatMetric() for split in ("val", "test") for what in "pt"})

    def thresholds(self) -> Tensor:
        """The decision threshold of each label [K]: `task.threshold`, or what `auto` picked (0.5 before that)."""
        chosen = self.threshold if self.threshold != "auto" else self.fitted_threshold or 0.5
        values = [float(chosen)] * self.num_classes if isinstance(chosen, (int, float)) else list(chosen)
        if len(values) != self.num_classes:
            raise ConfigError(
                f"task.threshold={list(values)}: {len(values)} values for {self.num_classes} labels "
                f"({', '.join(self.class_names)}); give one per label, one for all (task.threshold=0.5), or auto"
            )
        return torch.tensor(values, device=self.device)

    def decision_values(self) -> dict[str, Any]:
        return {"threshold": self.thresholds().tolist()}

    def forward(self, token_ids: Tensor) -> Tensor:
        return self.net(token_ids)

    def multi_hot(self, targets: Tensor) -> Tensor:
        return targets.float() if targets.ndim == 2 else F.one_hot(targets, self.num_classes).float()

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        return self.loss_fn(self(batch[0]), self.multi_hot(batch[1]))

    def _evaluate(self, batch: tuple[Tensor, Tensor], split: str) -> None:
        logits, targets = self(batch[0]), self.multi_hot(batch[1])
        loss = self.loss_fn(logits, targets)
        self.log(f"{split}/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(targets), sync_dist=True)
        self.kept_metric(f"{split}_p").update(torch.sigmoid(logits.float()))
        self.kept_metric(f"{split}_t").update(targets)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_validation_epoch_end(self) -> None:
        probabilities, targets = self._gathered("val")
        trainer = attached_trainer(self)
        if self.threshold == "auto" and not (trainer is not None and trainer.sanity_checking):
            self.fitted_threshold = self.hparams["fitted_threshold"] = best_thresholds(probabilities, targets)
        self._log_scores("val", probabilities, targets)

    def on_test_epoch_end(self) -> None:
        self._log_scores("test", *self._gathered("test"))

    def kept_metric(self, name: str) -> CatMetric:
        metric = self.kept[name]
        assert isinstance(metric, CatMetric)
        return metric

    def _gathered(self, split: str) -> tuple[Tensor, Tensor]:
        probabilities, targets = (self.kept_metric(f"{split}_{what}").compute() for what in "pt")
        for what in "pt":
            self.kept_metric(f"{split}_{what}").reset()
        return probabilities.view(-1, self.num_classes), targets.view(-1, self.num_classes)

    def _log_scores(self, split: str, probabilities: Tensor, targets: Tensor) -> None:
        """Macro and per-label F1 (at the thresholds) and average precision of a whole split."""
        k, truth = self.num_classes, targets.int()
        f1 = multilabel_f1_score((probabilities >= self.thresholds()).int(), truth, k, average="none")
        ap = multilabel_average_precision(probabilities, truth, k, average="none").nan_to_num(0.0)  # no positives
        self.log(f"{split}/f1", f1.mean(), prog_bar=True, sync_dist=True)
        scores = {f"{split}/ap": ap.mean()}
        for i, name in enumerate(self.class_names):
            scores |= {f"{split}/f1_{name}": f1[i], f"{split}/ap_{name}": ap[i]}
        self.log_dict(scores, sync_dist=True)

    # ---- predict and export ---------------------------------------------------------------------------------------
    def predict_step(self, batch: Tensor | Sequence[Tensor], batch_idx: int) -> dict[str, Tensor]:
        token_ids = batch[0] if isinstance(batch, (tuple, list)) else batch
        probabilities = torch.sigmoid(self(token_ids).float())
        return {"predicted": (probabilities >= self.thresholds()).int(), "probabilities": probabilities}

    def _names(self, row: Tensor) -> str:
        return ";".join(name for name, on in zip(self.class_names, row.tolist(), strict=True) if on)

    def prediction_rows(self, out: Mapping[str, Tensor]) -> list[dict[str, str | int | float]]:
        """`labels` (the predicted label names joined by `;`, empty if none) and `p_<label>` per label."""
        rows: list[dict[str, str | int | float]] = []
        for predicted, probabilities in zip(out["predicted"].cpu(), out["probabilities"].detach().cpu(), strict=True):
            p = {f"p_{name}": round(float(v), 6) for name, v in zip(self.class_names, probabilities, strict=True)}
            rows.append({"labels": self._names(predicted), **p})
        return rows

    def answer_columns(self, target: Tensor) -> dict[str, str | int | float]:
        hot = target if target.is_floating_point() else F.one_hot(target.long(), self.num_classes)
        return {"true_labels": self._names(hot)}

    def compare_outputs(self, reference: Tensor, exported: Tensor) -> dict[str, float]:
        """Logits of the deployed model against the task's: the share of samples whose every label's decision
        agrees, and the largest probability difference."""
        p_ref, p_exp = torch.sigmoid(reference.float()), torch.sigmoid(exported.float())
        limit = self.thresholds().to(p_ref.device)
        agree = ((p_ref >= limit) == (p_exp >= limit)).all(dim=1).float().mean()
        return {"agreement": float(agree), "max_abs_diff": float((p_ref - p_exp).abs().max())}
