"""Training-time augmentation of image batches (`data.augment`), run on whatever device the batch is on.

`on_after_batch_transfer` of :class:`~litforge.data.base.ImageDataModule` calls the augmentation on training
batches only, on the raw images (uint8 [0, 255] or float [0, 1], as the datamodule holds them), before
normalisation: the policies' colour operations (posterize, solarize, equalize, brightness) are defined on pixel
values, not on standardised ones. The output keeps the input's shape, dtype and value range.

- `none`: the batch is returned as it is.
- `flip_crop`: a random shift (reflect-pad by max(1, side // 8) pixels and crop back) and a horizontal flip with
  probability 1/2, per image. Vectorised here instead of torchvision's `RandomCrop` + `RandomHorizontalFlip`:
  those draw one offset and one flip per call, so on a batch every image would move alike, and a call per image
  would cost a v2 call per image. Handwritten digits are not flip-invariant (a flipped 2 or 7 is no digit): prefer
  `none` or a policy there.
- `randaugment`, `trivialaugment`, `autoaugment`: torchvision.transforms.v2's `RandAugment`, `TrivialAugmentWide`
  and `AutoAugment` (ImageNet policy) with their defaults, applied image by image. A v2 transform draws its random
  operation once per call, so a batched call would give the whole batch the same operation; the per-image loop is
  what makes each image its own draw. It costs 0.1-0.4 ms per image whatever the device (Python and kernel
  launches, not pixels: benchmarks/augment_cost.py, figures in benchmarks/README.md), so a 128-image CIFAR batch
  takes 20-50 ms, more than a ResNet-18 step on a big GPU; `flip_crop` is one batched gather (0.2-0.6 ms).
  Running on the batch's own device keeps `data.on_device=true` data on the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import Tensor
from torchvision.transforms import v2

from litforge.core.errors import ConfigError

Augment = Literal["none", "flip_crop", "randaugment", "trivialaugment", "autoaugment"]  # data.augment
AUGMENTS: tuple[str, ...] = get_args(Augment)
#: torchvision.transforms.v2 class of each policy
POLICIES: dict[str, Callable[[], v2.Transform]] = {
    "randaugment": v2.RandAugment,
    "trivialaugment": v2.TrivialAugmentWide,
    "autoaugment": v2.AutoAugment,
}


def resolve_augment(value: str | bool | None) -> str:
    """The augmentation's name; `true`/`false`, the older boolean spelling (configs, checkpoints), mean flip_crop
    and none."""
    if value is None or value is False:
        return "none"
    if value is True:
        return "flip_crop"
    if value not in AUGMENTS:
        raise ConfigError(f"data.augment={value!r} is not one of {', '.join(AUGMENTS)}; e.g. data.augment=flip_crop")
    return str(value)


def build_augment(name: str) -> Callable[[Tensor], Tensor] | None:
    """The batch augmentation for `data.augment=name`, or None for `none`."""
    name = resolve_augment(name)
    if name == "none":
        return None
    if name == "flip_crop":
        return random_crop_flip

    return PerImage(POLICIES[name]())


class PerImage:
    """Apply a torchvision v2 transform to each image of an (N, C, H, W) batch, so each image draws its own
    random operation and magnitude (a batched call would draw once for the whole batch)."""

    def __init__(self, transform: Callable[[Tensor], Tensor]) -> None:
        self.transform = transform

    def __call__(self, images: Tensor) -> Tensor:
        if len(images) == 0:
            return images
        return torch.stack([self.transform(image) for image in images])

    def __repr__(self) -> str:
        return f"PerImage({self.transform!r})"


def random_crop_flip(images: Tensor, padding: int | None = None) -> Tensor:
    """Batched random shift (reflect-pad + crop) and horizontal flip, a draw per image, on the batch's device.

    `padding` defaults to max(1, min(H, W) // 8): 4 pixels on CIFAR's 32x32, as in the usual ResNet recipe.
    """
    n, _, h, w = images.shape
    padding = max(1, min(h, w) // 8) if padding is None else padding
    padded = torch.nn.functional.pad(images, (padding,) * 4, mode="reflect" if min(h, w) > padding else "constant")
    dy = torch.randint(0, 2 * padding + 1, (n,), device=images.device)
    dx = torch.randint(0, 2 * padding + 1, (n,), device=images.device)
    rows = (dy.view(n, 1) + torch.arange(h, device=images.device).view(1, h)).view(n, 1, h, 1)
    cols = (dx.view(n, 1) + torch.arange(w, device=images.device).view(1, w)).view(n, 1, 1, w)
    channels = images.shape[1]
    batch_idx = torch.arange(n, device=images.device).view(n, 1, 1, 1)
    chan_idx = torch.arange(channels, device=images.device).view(1, channels, 1, 1)
    out = padded[batch_idx, chan_idx, rows, cols]
    flip = torch.rand(n, device=images.device) < 0.5
    return torch.where(flip.view(n, 1, 1, 1), out.flip(-1), out)
