"""A net for rows of numbers: a plain torch.nn.Module, sized by the data (num_features) and the task (num_outputs)."""

from __future__ import annotations

from torch import Tensor, nn


class TabularMLP(nn.Module):
    """`num_features → hidden → ... → num_outputs`, with LayerNorm and GELU between the Linear layers."""

    def __init__(self, num_features: int, num_outputs: int, hidden: int = 64, depth: int = 2,
                 dropout: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = num_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_outputs)

    def fsdp_units(self) -> list[nn.Module]:
        """Sharding facts beside the net: strategy=fsdp shards each Linear layer as one unit."""
        return [m for m in self.body if isinstance(m, nn.Linear)]

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))
