"""Nets for labelled texts (`data=text`): padded token ids [B, L] in (id 0 pads), one logit per class or label out.

Both take `vocab_size`, `max_length` and `num_classes` from the data, and read the length mask from the ids
themselves (`token_ids != 0`): the deployed model takes the ids alone, of any length up to `max_length`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from litforge.models.layers import BlockStack, TransformerBlock

Dropout = Annotated[float, Field(ge=0, lt=1)]


def masked_pool(x: Tensor, keep: Tensor, pooling: str) -> Tensor:
    """[B, L, D] -> [B, D] (or [B, 2D] for mean_max) over the positions `keep` [B, L] marks, padding left out."""
    weights = keep.unsqueeze(-1).to(x.dtype)
    mean = (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)
    if pooling == "mean":
        return mean
    top = x.masked_fill(~keep.unsqueeze(-1), torch.finfo(x.dtype).min).amax(1)
    return top if pooling == "max" else torch.cat([mean, top], dim=-1)


class TextPool(nn.Module):
    """Word embeddings, pooled over the text's tokens (mean, max or both), then a small MLP head: fastText's recipe
    (Joulin et al. 2017), a strong baseline for short texts, and fast."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: int | None = None,  # unused: pooling takes any length
        dim: Annotated[int, Field(ge=1)] = 64,
        hidden: Annotated[int, Field(ge=0)] = 64,
        pooling: Literal["mean", "max", "mean_max"] = "mean_max",
        dropout: Dropout = 0.1,
    ) -> None:
        super().__init__()
        self.pooling = pooling
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        width = dim * (2 if pooling == "mean_max" else 1)
        layers: list[nn.Module] = [nn.Dropout(dropout)]
        if hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        self.head = nn.Sequential(*layers, nn.Linear(hidden or width, num_classes))

    def forward(self, token_ids: Tensor) -> Tensor:
        return self.head(masked_pool(self.embed(token_ids), token_ids != 0, self.pooling))

    def fsdp_units(self) -> list[nn.Module]:
        return [self.embed, self.head]


class TextTransformer(BlockStack, nn.Module):
    """A small transformer encoder (litforge.models.layers' blocks, unmasked attention over the text's tokens, the
    padding masked out of attention and pooling), then a linear head on the masked mean of the last layer."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: Annotated[int, Field(ge=1)],
        dim: Annotated[int, Field(ge=1)] = 64,
        depth: Annotated[int, Field(ge=1)] = 2,
        heads: Annotated[int, Field(ge=1)] = 4,
        mlp_ratio: Annotated[float, Field(gt=0)] = 2.0,
        dropout: Dropout = 0.1,
        pooling: Literal["mean", "max", "mean_max"] = "mean",
    ) -> None:
        super().__init__()
        self.max_length, self.pooling = max_length, pooling
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.position = nn.Parameter(torch.zeros(1, max_length, dim))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim * (2 if pooling == "mean_max" else 1), num_classes)

    def forward(self, token_ids: Tensor) -> Tensor:
        token_ids = token_ids[:, : self.max_length]
        keep = token_ids != 0
        x = self.embed(token_ids) + self.position[:, : token_ids.shape[1]]
        mask = keep[:, None, None, :]  # [B, 1, 1, L]: every query attends to the text's tokens, never to padding
        for block in self.blocks:
            x = block(x, mask)
        return self.head(masked_pool(self.norm(x), keep, self.pooling))
