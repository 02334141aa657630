"""Batch-level MixUp / CutMix for classification (`task.mix`, `task.mix_alpha`), from torchvision.transforms.v2.

Applied in the training step only, to the normalised batch: `v2.MixUp` blends each image with the next one of the
batch by a factor drawn from Beta(alpha, alpha); `v2.CutMix` pastes a box of it, its area drawn the same way. Both
return the labels as class probabilities (N, C) summing to 1, which the loss takes as soft targets:
`torch.nn.CrossEntropyLoss` accepts probabilities (cross_entropy, label_smoothing), and
:class:`litforge.tasks.losses.FocalLoss` does too. Any other loss is refused here, in one line, instead of failing in
the first step.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn
from torchvision.transforms import v2

from litforge.core.errors import ConfigError
from litforge.tasks.losses import FocalLoss

MIXES: dict[str, type[v2.MixUp | v2.CutMix]] = {"mixup": v2.MixUp, "cutmix": v2.CutMix}  # task.mix → its class


def build_mixer(
    mix: str, alpha: float, num_classes: int, loss_fn: nn.Module
) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None:
    """The v2 transform for `task.mix`, or None for `none`; called as `images, soft = mixer(images, labels)`."""
    if mix == "none":
        return None
    if mix not in MIXES:
        raise ConfigError(f"task.mix={mix!r} is not one of none, mixup, cutmix; e.g. task.mix=mixup")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ConfigError(
            f"task.mix_alpha={alpha!r} must be a number > 0 (the Beta(alpha, alpha) of the mixing "
            f"factor), e.g. task.mix_alpha=0.2"
        )

    if not isinstance(loss_fn, (nn.CrossEntropyLoss, FocalLoss)):
        raise ConfigError(
            f"task.mix={mix} gives soft targets, which the loss {type(loss_fn).__name__} does not "
            f"take: pass loss=cross_entropy (or label_smoothing, focal), or task.mix=none"
        )

    return MIXES[mix](alpha=float(alpha), num_classes=num_classes)
