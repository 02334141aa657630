"""Text for language modelling: character- or byte-level tokens, optionally packed documents, in memory.

The embedded default is the Python language reference that ships inside CPython itself (`pydoc_data.topics`, the
text `help("assert")` prints: ~465k characters in ~90 documents), so `experiment=gpt_char` trains offline on real
prose. `data=text_file data.path=<file>` trains on your own corpus.

Documents and packing: the corpus is one token stream cut into `block_size` windows with no padding. With
`packed: true` each token also carries the id of its document, and the model attends only within a document
(see :func:`litforge.models.gpt.document_layout`); with `packed: false` context runs across documents.
"""

from __future__ import annotations

from pathlib import Path
from pydoc_data.topics import topics
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from litforge.core.bounds import Count, HeldOut
from litforge.core.errors import ConfigError, DataError
from litforge.core.hparams import HparamsAtFitStart
from litforge.data.pinned import pin_memory_for
from litforge.data.stateful import stateful_train_loader


def python_docs() -> list[str]:
    """The Python language reference, one document per topic, as shipped in the standard library."""
    return [topics[name] for name in sorted(topics)]


class Windows(Dataset):
    """Non-overlapping windows of `block_size` tokens: (input, next-token target, document ids)."""

    def __init__(self, tokens: Tensor, doc_ids: Tensor, block_size: int) -> None:
        self.tokens, self.doc_ids, self.block_size = tokens, doc_ids, block_size
        self.count = max(0, (len(tokens) - 1) // block_size)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        s = i * self.block_size
        e = s + self.block_size
        return self.tokens[s:e], self.tokens[s + 1 : e + 1], self.doc_ids[s:e]


class TextDataModule(HparamsAtFitStart, pl.LightningDataModule):
    """A corpus as token ids, split contiguously into train / val / test (the last fractions of the stream).

    States its shape at construction (it reads the text then: the vocabulary depends on it): `vocab_size`,
    `block_size`, `vocab` (the characters, for decoding; None for bytes) and the `unigram_loss` baseline.
    """

    kind = "text"

    def __init__(
        self,
        path: str | None = None,
        tokenizer: Literal["char", "byte"] = "char",
        document_separator: str | None = None,
        block_size: Count = 128,
        batch_size: Count = 64,
        eval_batch_size: Count | None = None,
        val_fraction: HeldOut = 0.05,
        test_fraction: HeldOut = 0.05,
        packed: bool = True,
        max_chars: Count | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if tokenizer not in ("char", "byte"):
            raise ConfigError(f"data.tokenizer={tokenizer!r}: use char (one token per character) or byte (UTF-8 bytes)")
        self.tokenizer, self.block_size, self.packed = tokenizer, block_size, packed
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        documents = self._read(path, document_separator, max_chars)
        text = "".join(documents)
        self.vocab: list[str] | None = sorted(set(text)) if tokenizer == "char" else None
        self.vocab_size = len(self.vocab) if self.vocab else 256
        ids = [self.encode(doc) for doc in documents]
        tokens = torch.cat(ids)
        doc_ids = torch.cat([torch.full((len(t),), i, dtype=torch.int64) for i, t in enumerate(ids)])
        n = len(tokens)
        n_test, n_val = int(n * test_fraction), int(n * val_fraction)
        n_train = n - n_val - n_test
        bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, n)}
        self._splits = {k: (tokens[a:b], doc_ids[a:b]) for k, (a, b) in bounds.items()}
        for split, (toks, _) in self._splits.items():
            if len(toks) <= block_size and (split == "train" or n_val or n_test):
                raise DataError(
                    f"the {split} split has {len(toks)} tokens, fewer than data.block_size={block_size} "
                    "+ 1: use a longer text, a smaller data.block_size or other data.*_fraction values"
                )
        counts = torch.bincount(self._splits["train"][0], minlength=self.vocab_size).double()
        p = counts[counts > 0] / counts.sum()
        # the loss of the best model that ignores context: the bar a language model must clear
        self.unigram_loss = float(-(p * p.log()).sum())

    @staticmethod
    def _read(path: str | None, separator: str | None, max_chars: int | None) -> list[str]:
        if path is None:
            documents = python_docs()
        else:
            file = Path(path).expanduser()
            if not file.is_file():
                raise DataError(f"data.path={file} is not a file: pass data.path=<a UTF-8 text file>")
            raw = file.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"data.path={file} is not UTF-8 text ({exc.reason} at byte {exc.start}): convert it "
                    "(e.g. iconv -t UTF-8) or pass a text file"
                ) from None
            if separator:  # keep the separator at the end of each document, so the text round-trips
                parts = text.split(separator)
                documents = [part + separator for part in parts[:-1]] + parts[-1:]
            else:
                documents = [text]
        if max_chars is not None:
            kept, total = [], 0
            for doc in documents:
                kept.append(doc[: max_chars - total])
                total += len(kept[-1])
                if total >= max_chars:
                    break
            documents = kept
        documents = [d for d in documents if d]
        if not documents:
            raise DataError(f"data.path={path} is empty: pass a file with text in it")
        return documents

    # ---- tokens ---------------------------------------------------------------------------------------------------
    def encode(self, text: str) -> Tensor:
        if self.vocab is None:
            return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)
        index = {c: i for i, c in enumerate(self.vocab)}
        return torch.tensor([index[c] for c in text], dtype=torch.int64)

    def describe(self) -> dict[str, Any]:
        """The shape facts the language-model task needs (passed to its constructor)."""
        return {
            "vocab_size": self.vocab_size,
            "block_size": self.block_size,
            "vocab": self.vocab,
            "unigram_loss": round(self.unigram_loss, 6),
            "packed": self.packed,
        }

    # ---- loaders --------------------------------------------------------------------------------------------------
    def _loader(self, split: str, train: bool) -> DataLoader:
        tokens, doc_ids = self._splits[split]
        if not self.packed:
            doc_ids = torch.zeros_like(doc_ids)
        windows = Windows(tokens, doc_ids, self.block_size)
        if train:  # resumable mid-epoch (litforge.data.stateful); the order follows the run's `seed`
            return stateful_train_loader(
                windows,
                batch_size=self.batch_size,
                seed=torch.initial_seed(),
                pin_memory=pin_memory_for(self.trainer),
                trainer=self.trainer,
            )
        return DataLoader(windows, batch_size=self.eval_batch_size, pin_memory=pin_memory_for(self.trainer))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
