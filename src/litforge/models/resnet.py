"""torchvision ResNets adapted to any channel count and to small images, optionally with ImageNet weights."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Annotated
from urllib.parse import urlparse

import torch
import torchvision.models as tvm
from pydantic import Field
from torch import Tensor, nn

from litforge.core.errors import ConfigError

# depth -> (builder, weights enum); .DEFAULT is the best ImageNet checkpoint torchvision publishes for that depth
ARCHS = {
    18: (tvm.resnet18, tvm.ResNet18_Weights),
    34: (tvm.resnet34, tvm.ResNet34_Weights),
    50: (tvm.resnet50, tvm.ResNet50_Weights),
}


def weights_cache_path(weights: tvm.WeightsEnum) -> str:
    """Where torch.hub looks for (and downloads) a checkpoint, so an offline user knows where to put the file."""
    return os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(urlparse(weights.url).path))


def load_pretrained(weights: tvm.WeightsEnum) -> dict[str, Tensor]:
    """torchvision's own loading path (hash-named cache file, download if missing), but tensors only.

    `weights_only=True` because a checkpoint is untrusted input: plain `torch.load` could run arbitrary pickled code.
    Without internet the download fails with a URLError (an OSError); we turn that into the exact file to place.
    """
    path = weights_cache_path(weights)
    try:
        return weights.get_state_dict(progress=True, check_hash=True, weights_only=True)
    except OSError as e:
        if os.path.exists(path):
            raise  # the file is there, so this is a genuine read error, not a missing download
        raise ConfigError(
            f"could not download the pretrained weights {weights.url} ({e}). Without internet, download that file "
            f"elsewhere and place it at {path} (file {os.path.basename(path)} in folder {os.path.dirname(path)}), "
            "or set model.pretrained=false."
        ) from e


class ResNet(nn.Module):
    """A torchvision ResNet-18/34/50 held in `self.net`, with the stem and head fitted to the data.

    Backbone vs head: the classifier head is `self.net.fc` (parameter names `net.fc.weight`, `net.fc.bias`);
    everything else is backbone. :meth:`head_parameters` names the head, so :mod:`litforge.models.transfer` can
    give a transfer-learning callback the backbone to freeze while the head trains.

    Small inputs (`small_input`, auto when the smaller image side is < 64): the ImageNet stem (7x7 stride-2 conv +
    max-pool) shrinks a 32x32 image to 8x8 before the first block and an 8x8 one to 2x2, so it is replaced by a 3x3
    stride-1 conv and no pooling (the CIFAR ResNet recipe). That new conv1 starts random even when pretrained.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        depth: Annotated[int, Field(ge=1)] = 18,
        pretrained: bool = False,
        small_input: bool | None = None,
    ) -> None:
        super().__init__()
        if depth not in ARCHS:
            raise ConfigError(f"model.depth={depth} is not a torchvision ResNet; use one of {sorted(ARCHS)}")
        build, weights_enum = ARCHS[depth]
        self.net = build(weights=None)
        if pretrained:
            self.net.load_state_dict(load_pretrained(weights_enum.DEFAULT))
        if small_input is None:
            small_input = min(image_size) < 64

        old = self.net.conv1
        if small_input:
            self.net.conv1 = nn.Conv2d(in_channels, old.out_channels, 3, stride=1, padding=1, bias=False)
            self.net.maxpool = nn.Identity()
        elif in_channels != 3:
            self.net.conv1 = nn.Conv2d(in_channels, old.out_channels, 7, stride=2, padding=3, bias=False)
            if pretrained:
                # Sum the RGB kernel over its inputs, spread evenly over the new ones: a grey image (all channels
                # equal) then gives the activations the pretrained net saw for the same grey RGB image.
                with torch.no_grad():
                    rgb_sum = old.weight.sum(dim=1, keepdim=True)
                    self.net.conv1.weight.copy_(rgb_sum.expand(-1, in_channels, -1, -1) / in_channels)

        self.net.fc = nn.Linear(self.net.fc.in_features, num_classes)

    def head_parameters(self) -> Iterator[nn.Parameter]:
        """The classifier head (`self.net.fc`): what stays trainable when fine-tuning with a frozen backbone."""
        return self.net.fc.parameters()

    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units (litforge.parallel): the four residual stages."""
        return [self.net.layer1, self.net.layer2, self.net.layer3, self.net.layer4]

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
