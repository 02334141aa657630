"""The deployed graph's input: images as decoded (NCHW, float32 in [0, 1] or uint8 0..255), normalised inside it.

Why: a net trained on standardised images silently gives wrong answers when a deployer forgets (or mistypes) the
training set's mean/std. Baking `(x - mean) / std` into the exported graph leaves the deployer a decode, a resize
and a division by 255 (none at all for `input_dtype=uint8`); the statistics are still written into the model's
metadata (:mod:`litforge.deploy.metadata`) for the record. torch.onnx has no preprocessing option of its own, so
the normalisation is a tiny wrapper module that the exporter traces with the net.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class Preprocessed(nn.Module):
    """`net` behind the training normalisation: takes what an image decoder gives, NCHW.

    `input_dtype="float32"`: pixels in [0, 1] (uint8 / 255); `"uint8"`: raw 0..255, divided by 255 in the graph.
    """

    mean: Tensor  # buffers (registered in __init__)
    std: Tensor

    def __init__(
        self, net: nn.Module, mean: Sequence[float], std: Sequence[float], input_dtype: str = "float32"
    ) -> None:
        super().__init__()
        self.net = net
        self.input_dtype = input_dtype
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, images: Tensor) -> Tensor:
        # the same float ops as the datamodule's normalize(), so the graph matches training's preprocessing exactly
        x = images.float().div(255.0) if self.input_dtype == "uint8" else images
        return self.net((x - self.mean) / self.std)


def as_deployed(images: Tensor, input_dtype: str) -> Tensor:
    """Raw split images (uint8, or float in [0, 1]) in the form the deployed graph takes."""
    if input_dtype == "uint8":
        return images if images.dtype == torch.uint8 else images.mul(255.0).round_().clamp_(0, 255).to(torch.uint8)
    return images.float().div(255.0) if images.dtype == torch.uint8 else images.float()
