"""Transformer layers shared by the ViT and the GPT: attention, the MLP, and the pre-norm block built from them.

Layout contract with `litforge.parallel` (keep these names stable): in each :class:`TransformerBlock`, `attn.q`,
`attn.k`, `attn.v` and `mlp.fc1` are column-parallel and `attn.proj` and `mlp.fc2` row-parallel (Megatron-LM).
Attention therefore takes the number of heads from the local width of `q` (`q.shape[-1] // head_dim`), so a
tensor-parallel shard holding only some of the heads runs unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from litforge.core.errors import ConfigError


@functools.cache
def compiled_flex_attention() -> Any:
    """FlexAttention compiled once per process: eager `flex_attention` is an unfused reference that materialises
    the scores (torch warns), so it pays only compiled. Compiling its kernel alone works whether or not the net is
    compiled (`compile=true` traces through it); it takes seconds on a GPU but ~100 s on a 2-core CPU, which is why
    the GPT uses it on CUDA only (litforge.models.gpt)."""
    return torch.compile(flex_attention, dynamic=False)


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

    def forward(self, x: Tensor, mask: Tensor | BlockMask | None = None) -> Tensor:
        """`mask` replaces `causal`: a (B, 1, T, T) bool tensor, True = may attend (e.g. block-diagonal for packed
        documents), for SDPA's masked kernel; or a FlexAttention `BlockMask` (the same rule, block-sparse: whole
        blocks outside it are skipped, so the fused kernel still runs), for compiled `flex_attention`."""
        B, T, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // self.head_dim  # local heads: fewer than configured when q/k/v are sharded
        q, k, v = (t.view(B, T, heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        drop = self.dropout if self.training else 0.0
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=self.causal)
        elif isinstance(mask, Tensor):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        else:  # a BlockMask; no dropout in FlexAttention: the GPT sends one only without dropout
            # inside `compile=true` the net's own compile fuses it; eager, the separately compiled kernel
            fused = q.is_cuda and not torch.compiler.is_compiling()
            y = (compiled_flex_attention() if fused else flex_attention)(q, k, v, block_mask=mask)
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


class TransformerBlock(nn.Module):
    """Pre-norm residual block, attention then the MLP: normalising before each sublayer keeps deep stacks
    trainable without warm-up tricks. `causal=True` for decoders (GPT); `mask` (B, 1, T, T) overrides it."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float, causal: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout, causal=causal)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio), dropout)

    def forward(self, x: Tensor, mask: Tensor | BlockMask | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))

    # ---- sharding facts (litforge.parallel) -----------------------------------------------------------------------
    #: Megatron-LM's split of one block: q/k/v and fc1 by output columns, proj and fc2 by input rows, so each block
    #: needs one all-reduce after attention and one after the MLP (Shoeybi et al. 2019)
    TENSOR_PARALLEL_PLAN = {
        "attn.q": "colwise",
        "attn.k": "colwise",
        "attn.v": "colwise",
        "attn.proj": "rowwise",
        "mlp.fc1": "colwise",
        "mlp.fc2": "rowwise",
    }

    def check_tensor_parallel(self, tp_size: int) -> None:
        """Heads and MLP width must split evenly over the tensor-parallel ranks, or shards would differ in shape."""
        heads = self.attn.q.out_features // self.attn.head_dim
        if heads % tp_size or self.mlp.fc1.out_features % tp_size:
            raise ConfigError(
                f"tensor parallelism over {tp_size} ranks needs the number of heads ({heads}) and the MLP width "
                f"({self.mlp.fc1.out_features}) to be divisible by {tp_size}: change model.heads / model.mlp_ratio "
                "or strategy.tensor_parallel_size"
            )


def blocks_tensor_parallel_plan(blocks: nn.ModuleList, prefix: str = "blocks") -> dict[str, str]:
    """The tensor-parallel plan of a stack of TransformerBlocks: every block split the Megatron way."""
    return {
        f"{prefix}.{i}.{name}": style
        for i in range(len(blocks))
        for name, style in TransformerBlock.TENSOR_PARALLEL_PLAN.items()
    }


class BlockStack:
    """The sharding facts (litforge.parallel) of a net whose body is `blocks`, a stack of TransformerBlocks (GPT, ViT):
    each block is an FSDP2 unit (the root unit gathers the rest: embeddings, head) and splits the Megatron way."""

    blocks: nn.ModuleList

    def fsdp_units(self) -> list[nn.Module]:
        return list(self.blocks)

    def tensor_parallel_plan(self) -> dict[str, str]:
        """Submodule → `colwise` | `rowwise`."""
        return blocks_tensor_parallel_plan(self.blocks)

    def check_tensor_parallel(self, tp_size: int) -> None:
        for block in self.blocks:
            if isinstance(block, TransformerBlock):
                block.check_tensor_parallel(tp_size)


T = TypeVar("T")


def split_runs(items: Sequence[T], parts: int, key: str) -> list[list[T]]:
    """`items` (blocks, layers) as `parts` consecutive runs, as even as possible (earlier runs one longer): the
    pipeline split. Fewer items than parts is refused in one line naming the model key that sets their number."""
    items = list(items)
    if len(items) < parts:
        raise ConfigError(
            f"{key} gives {len(items)} layer runs to split into {parts} pipeline stages: use a deeper "
            f"net (at least {parts}) or fewer stages (trainer.devices={max(1, len(items))})"
        )
    size, extra = divmod(len(items), parts)
    runs, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        runs.append(items[start:end])
        start = end
    return runs
