"""A GPT-style decoder (Radford et al. 2019), small enough to read top to bottom (after karpathy/nanoGPT).

Its blocks are the causal :class:`litforge.models.layers.TransformerBlock`s the ViT uses too, in `self.blocks`:
the FSDP units and the tensor-parallel plan's targets (see that module for the layout contract).

Packed sequences (a dynamic graph): `forward(idx, doc_ids)` accepts several documents packed into one row of
`block_size` tokens with no padding. The attention mask and the positions are then computed from the data of each
batch: a token attends only to earlier tokens of its own document (a block-diagonal causal mask) and positions
restart at 0 where a document starts. Without `doc_ids` (unpacked data) the blocks take the fused `is_causal`
kernel. Whether a batch has a boundary is never asked of the data: that would be a host sync per forward on a GPU.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from litforge.models.layers import TransformerBlock, blocks_tensor_parallel_plan, split_runs


def document_layout(doc_ids: Tensor) -> tuple[Tensor, Tensor | None]:
    """Positions within each document and the block-diagonal causal mask, for rows of packed documents.

    doc_ids (B, T): which document each token belongs to (non-decreasing along a row). Returns positions (B, T) and
    a (B, 1, T, T) mask (a row of one document gets the plain causal mask; no data-dependent branch, which would
    read the device every forward).
    """
    B, T = doc_ids.shape
    idx = torch.arange(T, device=doc_ids.device).expand(B, T)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    # position = index - index of the latest document start at or before it
    last_start = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=1).values
    positions = idx - last_start
    same_doc = doc_ids.unsqueeze(2) == doc_ids.unsqueeze(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril()
    return positions, (same_doc & causal).unsqueeze(1)


class GPT(nn.Module):
    """Token + learned position embeddings → `self.blocks` → final LayerNorm → `self.head` (tied to the embedding).

    `vocab_size` and `block_size` (the longest context) come from the text datamodule, like an image net's shape.
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        dim: int = 128,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok_embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Embedding(block_size, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, mlp_ratio, dropout, causal=True)
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.tok_embed.weight  # weight tying: fewer parameters, better small-data perplexity
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    # ---- sharding facts (litforge.parallel) -----------------------------------------------------------------------
    def fsdp_units(self) -> list[nn.Module]:
        """FSDP2 sharding units: the transformer blocks (the root unit gathers the rest: embeddings, head)."""
        return list(self.blocks)

    def tensor_parallel_plan(self) -> dict[str, str]:
        """Submodule → `colwise` | `rowwise`: every block split the Megatron way (litforge.models.layers)."""
        return blocks_tensor_parallel_plan(self.blocks)

    def check_tensor_parallel(self, tp_size: int) -> None:
        for block in self.blocks:
            block.check_tensor_parallel(tp_size)

    def forward(self, idx: Tensor, doc_ids: Tensor | None = None) -> Tensor:
        """Next-token logits (B, T, vocab) for token ids `idx` (B, T); see the module docstring for `doc_ids`."""
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.block_size}")
        if doc_ids is None:
            positions, mask = torch.arange(T, device=idx.device).expand(B, T), None
        else:
            positions, mask = document_layout(doc_ids)
        x = self.drop(self.tok_embed(idx) + self.pos_embed(positions))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))

    def pipeline_stages(self, num_stages: int) -> list[nn.Module]:
        """The net as `num_stages` consecutive stages (strategy=pipeline): runs of blocks, the embeddings with the
        first, the final norm and the (tied) head with the last. The stages share this net's modules (no copies)."""
        runs = split_runs(self.blocks, num_stages, "model.depth")
        return [GPTStage(self, run, first=i == 0, last=i == num_stages - 1) for i, run in enumerate(runs)]

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """Sample `max_new_tokens` continuations of `idx` (B, T), cropping the context to `block_size`."""
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size:])[:, -1, :] / max(temperature, 1e-6)
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
        if first:
            self.tok_embed, self.pos_embed, self.drop = net.tok_embed, net.pos_embed, net.drop
        self.blocks = nn.ModuleList(blocks)
        if last:
            self.norm, self.head = net.norm, net.head

    def forward(self, x: Tensor, doc_ids: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        if doc_ids is None:
            positions, mask = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2]), None
        else:
            positions, mask = document_layout(doc_ids)
        if self.first:  # token ids (B, T) -> embeddings, as GPT.forward
            x = self.drop(self.tok_embed(x) + self.pos_embed(positions))
        for block in self.blocks:
            x = block(x, mask)
        if self.last:
            return self.head(self.norm(x))
        return x if doc_ids is None else (x, doc_ids)
