"""A small Vision Transformer (Dosovitskiy et al. 2021) laid out for FSDP and tensor parallelism.

Layout contract with `litforge.parallel` (keep these names stable):
- `self.blocks` (nn.ModuleList of :class:`Block`) are the FSDP wrapping units.
- In each block, `attn.q`, `attn.k`, `attn.v` and `mlp.fc1` are column-parallel, `attn.proj` and `mlp.fc2`
  row-parallel. Attention therefore takes the number of heads from the local width of `q` (`q.shape[-1] //
  head_dim`), so a shard holding only some of the heads runs unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from litforge.errors import ConfigError


class Attention(nn.Module):
    """Multi-head self-attention with separate q/k/v projections, so each can be column-sharded on its own.

    `causal=True` lets each position attend only to itself and earlier ones (the GPT decoder); the ViT attends to all.
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, causal: bool = False) -> None:
        super().__init__()
        if dim % heads:  # every net built on this attention (ViT, GPT) gets the same actionable message
            raise ConfigError(
                f"model.dim={dim} is not divisible by model.heads={heads}; "
                f"use e.g. model.dim={max(heads, round(dim / heads) * heads)} or a heads count that divides {dim}"
            )
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout
        self.causal = causal
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """`mask` (B, 1, T, T) bool, True = may attend (e.g. block-diagonal for packed documents); replaces `causal`."""
        B, T, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // self.head_dim  # local heads: fewer than configured when q/k/v are sharded
        q, k, v = (t.view(B, T, heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        drop = self.dropout if self.training else 0.0
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=self.causal)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        y = y.transpose(1, 2).reshape(B, T, heads * self.head_dim)
        return self.proj_drop(self.proj(y))


class FeedForward(nn.Module):
    """The transformer MLP; fc1 is column-parallel and fc2 row-parallel, so the GELU needs no communication."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    """Pre-norm residual block: normalising before each sublayer keeps deep stacks trainable without warm-up tricks."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio), dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def nearest_divisor(n: int, target: int) -> int:
    """The divisor of n closest to target (ties go to the larger one, fewer tokens); used to suggest a patch size."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: (abs(d - target), -d))


class VisionTransformer(nn.Module):
    """Patchify with a strided conv, prepend a cls token, add learned positions, run `self.blocks`, classify cls.

    The head reads the cls token after a final LayerNorm: `self.norm`, `self.head`.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        patch_size: int = 4,
        dim: int = 128,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        H, W = image_size
        if H % patch_size or W % patch_size:
            suggestion = nearest_divisor(math.gcd(H, W), patch_size)
            raise ConfigError(
                f"model.patch_size={patch_size} does not divide the image size {H}x{W}; "
                f"use a patch size that divides both sides, e.g. model.patch_size={suggestion}"
            )
        num_patches = (H // patch_size) * (W // patch_size)
        self.patch_embed = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units (litforge.parallel): the transformer blocks."""
        return list(self.blocks)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, num_patches, dim)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(x + self.pos_embed)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])
