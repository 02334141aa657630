"""A small VGG-style CNN: the default net for small images, strong enough to learn and quick on a CPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field
from torch import Tensor, nn


def conv_bn_relu(c_in: int, c_out: int) -> nn.Sequential:
    """conv3x3 without bias: the BatchNorm right after it has its own shift, so a conv bias would be dead weight."""
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class CNN(nn.Module):
    """Stages of two conv3x3-BN-ReLU blocks, max-pooled between stages, then global average pool and a linear head.

    A stage is pooled only while the smaller spatial side stays >= 2 afterwards, so tiny inputs (8x8 digits) work
    with any number of stages; global average pooling makes the head independent of the image size.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        channels: Annotated[Sequence[Annotated[int, Field(ge=1)]], Field(min_length=1)] = (32, 64),
        dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        side = min(image_size)
        c_in = in_channels
        for i, c_out in enumerate(channels):
            if i > 0 and side // 2 >= 2:
                layers.append(nn.MaxPool2d(2))
                side //= 2
            layers += [conv_bn_relu(c_in, c_out), conv_bn_relu(c_out, c_out)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(c_in, num_classes)

    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units (litforge.parallel): each conv-BN-ReLU block."""
        return [block for block in self.features if isinstance(block, nn.Sequential)]

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.dropout(self.pool(self.features(x))))
