"""A multilayer perceptron on flattened pixels: the fastest baseline, useful to check the data and training loop."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

from torch import Tensor, nn

from litforge.core.bounds import Range
from litforge.models.layers import split_runs


class MLP(nn.Module):
    """Linear → ReLU → Dropout blocks on the flattened image, then a linear head.

    It ignores spatial structure on purpose: if it cannot beat chance, the bug is in the data, not the architecture.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        hidden_dims: Sequence[Annotated[int, Range(ge=1)]] = (256, 256),
        dropout: Annotated[float, Range(ge=0, lt=1)] = 0.1,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_channels * math.prod(image_size)
        for hidden in hidden_dims:
            layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units (litforge.parallel): each Linear layer."""
        return [layer for layer in self.net if isinstance(layer, nn.Linear)]

    def pipeline_stages(self, num_stages: int) -> list[nn.Module]:
        """The net as `num_stages` consecutive stages (strategy=pipeline): runs of layers, each Linear with the
        activation and dropout after it (Flatten goes with the first). Shares this net's modules."""
        layers: list[list[nn.Module]] = []
        for layer in self.net:
            if isinstance(layer, nn.Linear) or not layers:
                layers.append([])
            layers[-1].append(layer)
        if isinstance(self.net[0], nn.Flatten):  # Flatten opened a layer of its own: join it to the first Linear
            layers[1:2] = [layers[0] + layers[1]]
            del layers[0]
        runs = split_runs(layers, num_stages, "model.hidden_dims (its layers)")
        return [nn.Sequential(*(m for layer in run for m in layer)) for run in runs]

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
