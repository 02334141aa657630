"""Classification losses that `torch.nn` lacks. Plain cross-entropy (with label smoothing) is used straight from
`torch.nn.CrossEntropyLoss` in the configs; nothing here wraps it."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from litforge.core.bounds import HeldOut, NonNegative, Positive
from litforge.core.errors import ConfigError

REDUCTIONS = ("mean", "sum", "none")


class FocalLoss(nn.Module):
    """Multi-class focal loss from logits (Lin et al. 2017): FL = -alpha_t (1 - p_t)^gamma log p_t.

    Down-weights examples the model already gets right, so training on imbalanced or noisy-easy data focuses on the
    hard ones. With gamma=0, alpha=None it equals `F.cross_entropy` (label smoothing included).

    - `alpha`: a float scales the whole loss (the paper's 0.25); a sequence gives one weight per class (alpha_t is
      the weight of the sample's target class). "mean" averages over samples without renormalising by the weights
      (unlike `F.cross_entropy(weight=...)`).
    - `label_smoothing`: the target becomes (1 - eps) one-hot + eps / C, and the focal term is applied per class,
      FL = -sum_c alpha_c q_c (1 - p_c)^gamma log p_c, which reduces to smoothed cross-entropy at gamma=0.

    Inputs: logits (N, C) and integer targets (N,) or class probabilities (N, C) (soft targets, e.g. from
    `task.mix=mixup|cutmix`; label smoothing then smooths them like `F.cross_entropy` does). Computed in float32 via
    log_softmax, so extreme logits stay finite.
    """

    alpha: Tensor | None  # buffer: per-class weights, or None

    def __init__(
        self,
        gamma: NonNegative = 2.0,  # 0 = plain cross-entropy
        alpha: Positive | Annotated[list[NonNegative], Field(min_length=1)] | None = None,  # per-class weights
        label_smoothing: HeldOut = 0.0,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ConfigError(f"loss reduction={reduction!r} is not supported; use one of {list(REDUCTIONS)}")
        if gamma < 0:
            raise ConfigError(f"focal loss gamma={gamma} must be >= 0 (0 is plain cross-entropy, 2 is the usual)")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ConfigError(f"label_smoothing={label_smoothing} must be in [0, 1] (0.1 is typical)")
        self.gamma = gamma
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.scale = float(alpha) if isinstance(alpha, (int, float)) else 1.0
        # not persistent: the weights come from the config, so checkpoints must not pin (or clash with) them
        # a sequence of per-class weights (Hydra may pass a ListConfig) becomes the buffer; a number is `scale`
        class_alpha = (
            None if alpha is None or isinstance(alpha, (int, float)) else torch.tensor([float(a) for a in alpha])
        )
        self.register_buffer("alpha", class_alpha, persistent=False)

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        num_classes = logits.shape[1]
        logp = F.log_softmax(logits.float(), dim=1)
        if self.alpha is not None and self.alpha.numel() != num_classes:
            raise ConfigError(
                f"focal loss alpha has {self.alpha.numel()} weights but the model predicts {num_classes} classes; "
                "give one weight per class or a single float"
            )
        q = target.float() if target.is_floating_point() else F.one_hot(target, num_classes).float()
        if self.label_smoothing:
            q = q * (1 - self.label_smoothing) + self.label_smoothing / num_classes
        loss = -q * logp
        if self.gamma:
            # 1 - p via expm1 keeps precision when p is close to 1; clamp keeps the pow gradient finite for gamma < 1
            loss = loss * (-torch.expm1(logp)).clamp_min(torch.finfo(logp.dtype).tiny).pow(self.gamma)
        if self.alpha is not None:
            loss = loss * self.alpha
        loss = self.scale * loss.sum(dim=1)
        if self.reduction == "mean":
            return loss.mean()
        return loss.sum() if self.reduction == "sum" else loss
