"""A GPT-style decoder (Radford et al. 2019), small enough to read top to bottom (after karpathy/nanoGPT).

Its blocks are the causal :class:`litforge.models.layers.TransformerBlock`s the ViT uses too, in `self.blocks`:
the FSDP units and the tensor-parallel plan's targets (see that module for the layout contract).

Packed sequences (a dynamic graph): `forward(idx, doc_ids)` accepts several documents packed into one row of
`block_size` tokens with no padding. The attention mask and the positions are then computed from the data of each
batch: a token attends only to earlier tokens of its own document (a block-diagonal causal mask) and positions
restart at 0 where a document starts. Without `doc_ids` (unpacked data) the blocks take the fused `is_causal`
kernel. Whether a batch has a boundary is never asked of the data: that would be a host sync per forward on a GPU.

How packed attention is computed (`attention`): an explicit (B, 1, T, T) mask rules out SDPA's fused flash and
memory-efficient kernels on a GPU (they take `is_causal` only), so on CUDA the document rule becomes a FlexAttention
`BlockMask`, built once per batch and shared by every block, and the compiled `flex_attention` kernel skips the
blocks outside it (a row of one document costs what a causal row costs). On a CPU the explicit mask stays:
FlexAttention has no CPU backward, its eager forward is an unfused reference, compiling it takes ~100 s on 2 cores,
and at gpt_char's sizes the masked
SDPA costs the same as `is_causal` there (benchmarks/gpt_speed.py). Both give the same numbers (tests: ≤ 1e-5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import torch
from pydantic import Field
from torch import Tensor, nn
from torch.nn.attention.flex_attention import create_block_mask

from litforge.core.errors import ConfigError
from litforge.models.layers import BlockStack, TransformerBlock, split_runs

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


def document_layout(doc_ids: Tensor, with_mask: bool = True) -> tuple[Tensor, Tensor | None]:
    """Positions within each document and the block-diagonal causal mask, for rows of packed documents.

    doc_ids (B, T): which document each token belongs to (non-decreasing along a row). Returns positions (B, T) and
    a (B, 1, T, T) mask (a row of one document gets the plain causal mask; no data-dependent branch, which would
    read the device every forward); `with_mask=False` skips the mask (None) for a caller that builds its own.
    """
    B, T = doc_ids.shape
    idx = torch.arange(T, device=doc_ids.device).expand(B, T)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    # position = index - index of the latest document start at or before it
    last_start = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=1).values
    positions = idx - last_start
    if not with_mask:
        return positions, None
    same_doc = doc_ids.unsqueeze(2) == doc_ids.unsqueeze(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return positions, (same_doc & causal).unsqueeze(1)


@torch.compiler.disable  # built eagerly once per batch also under `compile=true` (as torchtitan builds its masks)
def document_block_mask(doc_ids: Tensor) -> BlockMask:
    """The block-diagonal causal rule of `document_layout` as a FlexAttention BlockMask (built on the device of
    `doc_ids`, with tensor ops only: no host read)."""
    B, T = doc_ids.shape

    def same_document_causal(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return (doc_ids[b, q] == doc_ids[b, kv]) & (q >= kv)

    return create_block_mask(same_document_causal, B, None, T, T, device=doc_ids.device)


ATTENTION = ("auto", "flex", "mask")


def attention_inputs(
    x: Tensor, doc_ids: Tensor | None, attention: str, dropout: float, training: bool
) -> tuple[Tensor, Tensor | BlockMask | None]:
    """Positions (B, T) and the attention mask for `x` (B, T, ...): none without documents, else the explicit
    block-diagonal mask or FlexAttention's block mask as `model.attention` picks (`auto`: flex on CUDA unless dropout
    trains). One function for GPT.forward and its pipeline stages, so both take the same path."""
    if doc_ids is None:
        return torch.arange(x.shape[1], device=x.device).expand(x.shape[:2]), None
    flex = attention == "flex" or (attention == "auto" and x.is_cuda and not (dropout and training))
    positions, mask = document_layout(doc_ids, with_mask=not flex)
    if flex:
        if not x.is_cuda and torch.is_grad_enabled():
            raise ConfigError(
                "model.attention=flex cannot train on a CPU (FlexAttention has no CPU "
                "backward in torch): use model.attention=auto (the explicit mask on CPU) or a GPU"
            )
        mask = document_block_mask(doc_ids)
    return positions, mask


class GPT(BlockStack, nn.Module):
    """Token + learned position embeddings → `self.blocks` → final LayerNorm → `self.head` (tied to the embedding).

    `vocab_size` and `block_size` (the longest context) come from the text datamodule, like an image net's shape.
    `attention` picks the packed-document path: `auto` (FlexAttention on CUDA without dropout, else the explicit
    mask), `flex` or `mask` (see the module docstring).
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        dim: Annotated[int, Field(ge=1)] = 128,
        depth: Annotated[int, Field(ge=1)] = 4,
        heads: Annotated[int, Field(ge=1)] = 4,
        mlp_ratio: Annotated[float, Field(gt=0)] = 4.0,
        dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0,
        attention: Literal["auto", "flex", "mask"] = "auto",
    ) -> None:
        super().__init__()
        if attention not in ATTENTION:
            raise ConfigError(
                f"model.attention={attention!r}: use auto (FlexAttention on CUDA, the explicit mask on "
                "CPU), flex or mask"
            )
        if attention == "flex" and dropout:
            raise ConfigError(
                f"model.attention=flex with model.dropout={dropout}: FlexAttention has no attention "
                "dropout; use model.dropout=0 or model.attention=mask"
            )
        self.block_size = block_size
        self.attention = attention
        self.dropout = dropout
        self.tok_embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Embedding(block_size, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, mlp_ratio, dropout, causal=True) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.tok_embed.weight  # weight tying: fewer parameters, better small-data perplexity
        self.apply(self.init_weights)

    @staticmethod
    def init_weights(module: nn.Module) -> None:
        """GPT-2's init, applied to every module after construction (and replayed on shards by
        litforge.parallel.meta_init, which finds it by this name)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: Tensor, doc_ids: Tensor | None = None) -> Tensor:
        """Next-token logits (B, T, vocab) for token ids `idx` (B, T); see the module docstring for `doc_ids`."""
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.block_size}")
        positions, mask = attention_inputs(idx, doc_ids, self.attention, self.dropout, self.training)
        x = self.drop(self.tok_embed(idx) + self.pos_embed(positions))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))

    def pipeline_stages(self, num_stages: int) -> list[nn.Module]:
        """The net as `num_stages` consecutive stages (strategy=pipeline): runs of blocks, the embeddings with the
        first, the final norm and the (tied) head with the last. The stages share this net's modules (no copies)."""
        runs = split_runs(list(self.blocks), num_stages, "model.depth")
        return [GPTStage(self, run, first=i == 0, last=i == num_stages - 1) for i, run in enumerate(runs)]

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Sample `max_new_tokens` continuations of `idx` (B, T), cropping the context to `block_size`."""
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size :])[:, -1, :] / max(temperature, 1e-6)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # a slice: no index tensor copy
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return idx


class GPTStage(nn.Module):
    """One pipeline stage of a :class:`GPT`. With packed rows every stage also takes the document ids (and, but for
    the last, passes them on), each stage building the attention mask from them as GPT.forward does."""

    def __init__(self, net: GPT, blocks: list[nn.Module], first: bool, last: bool) -> None:
        super().__init__()
        self.first, self.last = first, last
        self.attention, self.dropout = net.attention, net.dropout  # the attention path GPT.forward would take
        if first:
            self.tok_embed, self.pos_embed, self.drop = net.tok_embed, net.pos_embed, net.drop
        self.blocks = nn.ModuleList(blocks)
        if last:
            self.norm, self.head = net.norm, net.head

    def forward(self, x: Tensor, doc_ids: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        positions, mask = attention_inputs(x, doc_ids, self.attention, self.dropout, self.training)
        if self.first:  # token ids (B, T) -> embeddings, as GPT.forward
            x = self.drop(self.tok_embed(x) + self.pos_embed(positions))
        for block in self.blocks:
            x = block(x, mask)
        if self.last:
            return self.head(self.norm(x))
        return x if doc_ids is None else (x, doc_ids)
