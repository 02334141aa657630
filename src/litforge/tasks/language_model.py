"""Language modelling: next-token prediction with any decoder net (`model=gpt`) on text data (`data=python_docs`).

Logs `{train,val,test}/loss` (cross-entropy in nats per token), `{val,test}/ppl` (perplexity, exp of the loss,
from torchmetrics) and `val/unigram_loss`, the loss of the best context-free model on the same data: a run that
learned anything from context ends well below it.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn
from torchmetrics.text import Perplexity

from litforge.core.errors import ConfigError
from litforge.models.nets import build_net
from litforge.tasks.task import LitforgeTask, build_loss

Batch = tuple[Tensor, Tensor, Tensor]  # inputs, next-token targets, document ids (all B x T)


class LanguageModelTask(LitforgeTask):
    data_kind = "text"

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        vocab_size: int,
        block_size: int,
        vocab: list[str] | None = None,
        unigram_loss: float | None = None,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",
        packed: bool = True,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])
        self.vocab = vocab  # the characters of a char-level model (None = UTF-8 bytes): what decode() needs
        self.unigram_loss = unigram_loss
        # whether rows hold several documents: only then does the net need their ids (and a mask); unpacked rows
        # take the fused causal attention kernel without looking at the data (no host sync)
        self.packed = packed
        self.net = build_net(net, vocab_size=vocab_size, block_size=block_size)
        self.loss_fn: nn.Module = build_loss(loss, nn.CrossEntropyLoss)
        self.val_ppl = Perplexity()
        self.test_ppl = Perplexity()

    def forward(self, idx: Tensor, doc_ids: Tensor | None = None) -> Tensor:
        return self.net(idx, doc_ids if self.packed else None)

    def _shared_step(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        inputs, targets, doc_ids = batch
        logits = self(inputs, doc_ids)
        loss = self.loss_fn(logits.flatten(0, 1), targets.flatten())
        return loss, logits, targets

    def step_loss(self, batch: Batch) -> Tensor:
        return self._shared_step(batch)[0]

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, logits, targets = self._shared_step(batch)
        self.val_ppl.update(logits.float(), targets)
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(targets), sync_dist=True)
        self.log("val/ppl", self.val_ppl, on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        if self.unigram_loss is not None:  # a constant of the data: once an epoch (one copy to the device), every rank
            self.log("val/unigram_loss", self.unigram_loss, sync_dist=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        loss, logits, targets = self._shared_step(batch)
        self.test_ppl.update(logits.float(), targets)
        self.log("test/loss", loss, on_epoch=True, batch_size=len(targets), sync_dist=True)
        self.log("test/ppl", self.test_ppl, on_epoch=True)

    # ---- text in, text out ----------------------------------------------------------------------------------------
    def encode(self, text: str) -> Tensor:
        if self.vocab is None:
            return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)
        index = {c: i for i, c in enumerate(self.vocab)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ConfigError(
                f"the prompt has characters the model never saw: {unknown}; use only characters of its training text"
            )
        return torch.tensor([index[c] for c in text], dtype=torch.int64)

    def decode(self, ids: list[int]) -> str:
        if self.vocab is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return "".join(self.vocab[i] for i in ids)

    def generate_text(
        self,
        prompt: str = "",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> str:
        """Sample a continuation of `prompt` (an empty prompt starts from a newline, or token 0)."""
        if prompt:
            start = self.encode(prompt)
        else:
            start = self.encode("\n") if self.vocab is None or "\n" in self.vocab else torch.zeros(1, dtype=torch.int64)
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        was_training = self.training
        self.eval()
        # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
        out = self.net.generate(start.to(self.device).unsqueeze(0), max_new_tokens, temperature, top_k, generator)  # type: ignore[operator]
        self.train(was_training)
        return prompt + self.decode(out[0, len(start) :].tolist())
