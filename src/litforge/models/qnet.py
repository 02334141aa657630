"""The Q-network of a DQN agent: observation vector in, one action value per discrete action out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field
from torch import Tensor, nn


class QNetwork(nn.Module):
    """An MLP `observation_size → hidden_dims → num_actions` (the sizes come from the environment)."""

    def __init__(
        self, observation_size: int, num_actions: int, hidden_dims: Sequence[Annotated[int, Field(ge=1)]] = (128, 128)
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = observation_size
        for hidden in hidden_dims:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_actions))
        self.net = nn.Sequential(*layers)

    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units (litforge.parallel): each Linear layer."""
        return [layer for layer in self.net if isinstance(layer, nn.Linear)]

    def forward(self, observations: Tensor) -> Tensor:
        return self.net(observations)
