"""strategy=pipeline: the nets' pipeline splits, the schedule loop on gloo ranks, and the strategy end to end."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from litforge.errors import ConfigError
from litforge.models.cnn import CNN
from litforge.models.gpt import GPT
from litforge.models.mlp import MLP
from litforge.models.vit import VisionTransformer
from litforge.parallel.pipeline_split import owners, split_net


def _nets() -> list[tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    return [
        (MLP(1, (4, 4), 3, hidden_dims=(8, 8, 8), dropout=0.1), torch.randn(5, 1, 4, 4)),
        (VisionTransformer(3, (8, 8), 4, patch_size=4, dim=16, depth=3, heads=2), torch.randn(5, 3, 8, 8)),
        (GPT(11, 6, dim=16, depth=4, heads=2), torch.randint(0, 11, (5, 6))),
    ]


@pytest.mark.parametrize("num_stages", [2, 3])
def test_stages_compose_to_the_whole_net(num_stages: int) -> None:
    for net, x in _nets():
        net.eval()
        stages = split_net(net, num_stages)
        y = x
        for stage in stages:
            y = stage(y)
        assert torch.equal(y, net(x)), type(net).__name__
        # every tensor is in exactly one stage, except the GPT's tied embedding/head (first and last)
        shared = {name: where for name, where in owners(net, stages).items() if len(where) > 1}
        assert shared == ({"tok_embed.weight": [0, num_stages - 1], "head.weight": [0, num_stages - 1]}
                          if isinstance(net, GPT) else {})


def test_unsplittable_nets_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"BatchNorm.*use model=mlp"):
        split_net(CNN(3, (8, 8), 4), 2)
    with pytest.raises(ConfigError, match=r"declares pipeline_stages"):
        split_net(nn.Sequential(nn.Linear(2, 2)), 2)
    with pytest.raises(ConfigError, match=r"model.depth gives 2 layer runs to split into 3 pipeline stages"):
        split_net(GPT(11, 6, dim=16, depth=2, heads=2), 3)
