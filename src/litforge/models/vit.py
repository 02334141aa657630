"""A small Vision Transformer (Dosovitskiy et al. 2021) laid out for FSDP and tensor parallelism.

Its blocks are :class:`litforge.models.layers.TransformerBlock`s in `self.blocks`: the FSDP units and the
tensor-parallel plan's targets (see that module for the layout contract).
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor, nn

from litforge.core.errors import ConfigError
from litforge.models.layers import BlockStack, TransformerBlock, split_runs


def nearest_divisor(n: int, target: int) -> int:
    """The divisor of n closest to target (ties go to the larger one, fewer tokens); used to suggest a patch size."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: (abs(d - target), -d))


class VisionTransformer(BlockStack, nn.Module):
    """Patchify with a strided conv, prepend a cls token, add learned positions, run `self.blocks`, classify cls.

    The head reads the cls token after a final LayerNorm: `self.norm`, `self.head`.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        patch_size: Annotated[int, Field(ge=1)] = 4,
        dim: Annotated[int, Field(ge=1)] = 128,
        depth: Annotated[int, Field(ge=1)] = 4,
        heads: Annotated[int, Field(ge=1)] = 4,
        mlp_ratio: Annotated[float, Field(gt=0)] = 4.0,
        dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0,
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
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the net's own tokens (its layers have their own): also what meta-device init replays."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, num_patches, dim)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(x + self.pos_embed)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])

    def pipeline_stages(self, num_stages: int) -> list[nn.Module]:
        """The net as `num_stages` consecutive stages (strategy=pipeline): runs of blocks, the patch embedding,
        cls token and positions with the first, the final norm and head with the last. Shares this net's modules."""
        runs = split_runs(list(self.blocks), num_stages, "model.depth")
        return [ViTStage(self, run, first=i == 0, last=i == num_stages - 1) for i, run in enumerate(runs)]


class ViTStage(nn.Module):
    """One pipeline stage of a :class:`VisionTransformer`; the first takes images, the last returns logits."""

    def __init__(self, net: VisionTransformer, blocks: list[nn.Module], first: bool, last: bool) -> None:
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.patch_embed, self.drop = net.patch_embed, net.drop
            self.cls_token, self.pos_embed = net.cls_token, net.pos_embed  # the same Parameters as the net's
        self.blocks = nn.ModuleList(blocks)
        if last:
            self.norm, self.head = net.norm, net.head

    def forward(self, x: Tensor) -> Tensor:
        if self.first:  # as VisionTransformer.forward
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
            x = self.drop(x + self.pos_embed)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0]) if self.last else x
