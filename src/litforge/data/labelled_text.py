"""`data=text`: short texts with one label, or a set of labels, each (support messages, reviews, titles): token ids.

Files as users have them: `.jsonl` (one JSON object a line), `.csv`/`.tsv` (a header row; the delimiter sniffed)
or `.txt` in fastText's format (`__label__billing __label__bug I was charged twice`). The text is the `data.text`
field, the answer `data.target` (`labels`, else `label`); a list of labels (jsonl), several `__label__`s or a cell
holding `data.label_separator` (csv) makes the data multi-label. `data.path` is split by the fractions, or
`data.train`/`data.val`/`data.test` name the splits (a missing val or test split is carved out of train). With
neither, the support messages shipped inside litforge (`embedded/support_messages.jsonl`, 600 rows, 1-3 labels out
of 5) are used, so `experiment=text_multilabel` runs offline.

Tokens: words (lowercased, the regex `\\b\\w+\\b`), the `data.max_words` most frequent in the training split
counted by scikit-learn's `CountVectorizer` (a project dependency already); id 0 pads, 1 is a word training never
saw. A word vocabulary rather than HF `tokenizers`' BPE: that library is no dependency of litforge, and on short
texts of a few hundred rows a subword model has too little to learn from. The tokenizer is plain data
(:meth:`state_dict`: its words and rule), so it travels in the checkpoint and eval, predict and export need no
training file; export writes it into the model's metadata as JSON.

Batches are `(token_ids, targets)`: ids padded with 0 to the batch's longest text (a net's length mask is
`token_ids != 0`), cut at `data.max_length` (the run says how many texts were cut); targets int64 class indices, or
float multi-hot rows [B, K] for multi-label data. The training loader is torchdata's `StatefulDataLoader` with the
padding collate, so a run resumed mid-epoch sees exactly the batches it had not trained on.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from sklearn.feature_extraction.text import CountVectorizer
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from litforge.core.bounds import Count, HeldOut, Seed
from litforge.core.contracts import ExampleInput
from litforge.core.errors import ConfigError
from litforge.data.base import SplitDataModule
from litforge.data.memory import split_indices
from litforge.data.stateful import stateful_train_loader
from litforge.data.tables import Encoding, decode, sniff_delimiter

log = logging.getLogger(__name__)

EMBEDDED = Path(__file__).with_name("embedded") / "support_messages.jsonl"
WORDS = r"(?u)\b\w+\b"
PAD, UNKNOWN = 0, 1
Row = tuple[str, list[str] | None, str]  # (text, its labels or None where the file has none, "file:line")


def read_rows(
    path: str, text: str, target: str | None, separator: str, key: str, encoding: str = "auto"
) -> tuple[list[Row], bool]:
    """The rows of a .jsonl, .csv/.tsv or .txt file, and whether their labels are sets (multi-label). `target`: the
    field of the answer (None: inputs only, for predict). Refused in one line naming the file, the line and the fix:
    not UTF-8, a missing field, an empty text, a row without labels."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{key}={path}: no such file; pass a .jsonl, .csv, .tsv or .txt file")
    content = decode(file.read_bytes(), path, encoding, key)
    suffix = file.suffix.lower()
    records: list[tuple[int, dict[str, Any]]] = []
    if suffix == ".jsonl":
        for number, line in enumerate(content.splitlines(), 1):
            if line.strip():
                try:
                    records.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{key}={path}: line {number} is not JSON ({exc.msg}); fix that line") from None
    elif suffix in (".csv", ".tsv"):
        delimiter = "\t" if suffix == ".tsv" else sniff_delimiter(content)
        reader = csv.DictReader(io.StringIO(content, newline=""), delimiter=delimiter)
        records = [(reader.line_num, dict(r)) for r in reader if any((v or "").strip() for v in r.values())]
    elif suffix == ".txt":  # fastText's format: `__label__a __label__b the text`; predict: one text a line
        for number, line in enumerate(content.splitlines(), 1):
            words = line.split()
            marked = [w[9:] for w in words if w.startswith("__label__")]
            if line.strip():
                records.append((number, {text: " ".join(w for w in words if not w.startswith("__label__"))}))
                records[-1][1]["labels"] = marked if len(marked) > 1 else marked[0] if marked else None
        target = target and "labels"
    else:
        raise ConfigError(f"{key}={path}: a {suffix or 'file without suffix'}; pass a .jsonl, .csv, .tsv or .txt file")
    if not records:
        raise ConfigError(f"{key}={path}: no rows; pass a file with one text a line")
    if target == "labels" and "labels" not in records[0][1] and "label" in records[0][1]:
        target = "label"  # the default field's other usual name
    rows: list[Row] = []
    multilabel = False
    for number, record in records:
        where = f"{key}={path}: line {number}"
        if not isinstance(record, dict) or text not in record:
            fields = ", ".join(record) if isinstance(record, dict) else "none"
            raise ConfigError(f"{where} has no field `{text}` (its fields: {fields}); name the text's with data.text=")
        if not str(record[text] or "").strip():
            raise ConfigError(f"{where} has an empty `{text}`: write its text, or drop the row")
        labels: list[str] | None = None
        if target is not None:
            value = record.get(target)
            if isinstance(value, str) and separator in value:
                value = [v.strip() for v in value.split(separator) if v.strip()]
            multilabel |= isinstance(value, list)
            labels = [str(v) for v in value] if isinstance(value, list) else [] if value in (None, "") else [str(value)]
            if not labels:
                raise ConfigError(
                    f"{where} has no labels (`{target}`: {json.dumps(value)}): give every row at least one (a label "
                    "of its own, e.g. `other`, where none applies), or drop the row; data.target names the field"
                )
        rows.append((str(record[text]), labels, f"{path}:{number}"))
    return rows, multilabel


def fit_tokenizer(texts: Sequence[str], max_words: int) -> dict[str, Any]:
    """The word tokenizer of the training texts, as plain data (what the checkpoint and the ONNX metadata keep)."""
    counts = CountVectorizer(token_pattern=WORDS, lowercase=True, max_features=max_words).fit(texts)
    words = sorted(counts.vocabulary_, key=counts.vocabulary_.__getitem__)
    return {"kind": "words", "lowercase": True, "pattern": WORDS, "pad_id": PAD, "unknown_id": UNKNOWN, "words": words}


def encode(texts: Sequence[str], tokenizer: dict[str, Any], max_length: int) -> tuple[list[Tensor], int]:
    """Each text's token ids (at least one: a text of no word is one unknown token), cut at `max_length`; and how
    many texts were cut."""
    index = {word: i + 2 for i, word in enumerate(tokenizer["words"])}
    pattern = re.compile(tokenizer["pattern"])
    ids = [[index.get(w, UNKNOWN) for w in pattern.findall(t.lower())] or [UNKNOWN] for t in texts]
    return [torch.tensor(i[:max_length], dtype=torch.int64) for i in ids], sum(len(i) > max_length for i in ids)


def pad(ids: Sequence[Tensor]) -> Tensor:
    """[B, L] int64: the texts' ids padded with 0 (PAD) to the longest."""
    return pad_sequence(list(ids), batch_first=True, padding_value=PAD)


def collate(batch: Sequence[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """(token ids padded to the batch's longest text, stacked targets): the loaders' collate function."""
    ids, targets = zip(*batch, strict=True)
    return pad(ids), torch.stack(targets)


class LabelledTextDataModule(SplitDataModule):
    """Texts and their label (or set of labels) as `(token_ids, targets)` batches; `kind = "tokens"`, what
    `task=multilabel` and `task=classification` train on with `model=text_pool` or `model=text_transformer`.

    Nothing is read at construction: `describe()` (the training job asks it first) reads the files and fits the
    tokenizer on the training split; a checkpoint's state (`load_state_dict`) gives the tokenizer and the labels
    instead, so eval, predict and export read only the split they use.
    """

    kind = "tokens"

    def __init__(
        self,
        path: str | None = None,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        text: str = "text",
        target: str = "labels",
        label_separator: str = ";",
        encoding: Encoding = "auto",
        max_words: Count = 20000,
        max_length: Count = 128,
        batch_size: Count = 32,
        eval_batch_size: Count | None = None,
        val_fraction: HeldOut = 0.1,
        test_fraction: HeldOut = 0.2,
        split_seed: Seed = 0,
        shuffle_seed: Seed = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if path and train:
            raise ConfigError(f"data.path={path} and data.train={train}: pass one (data.path is split by fractions)")
        self.source: str | None = path or train  # None: the embedded messages
        self.key = "data.path" if path else "data.train" if train else "data"
        self.files = {"val": val, "test": test}
        self.text, self.target, self.separator, self.encoding = text, target, label_separator, encoding
        self.max_words, self.max_length = max_words, max_length
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or max(batch_size, 256)
        self.fractions, self.split_seed, self.shuffle_seed = (val_fraction, test_fraction), split_seed, shuffle_seed
        self.tokenizer: dict[str, Any] | None = None  # fitted on the training split, or from the checkpoint
        self.class_names: list[str] = []
        self.multilabel = False
        self._pool: list[Row] | None = None
        self._splits: dict[str, tuple[list[Tensor], Tensor]] = {}

    # ---- reading --------------------------------------------------------------------------------------------------
    def _read(self, path: str | None, key: str) -> list[Row]:
        rows, multilabel = read_rows(str(path or EMBEDDED), self.text, self.target, self.separator, key, self.encoding)
        self.multilabel |= multilabel
        return rows

    def split_rows(self, split: str) -> list[Row]:
        """The rows of "train", "val" or "test": its own file, or its seeded share of `data.path`/`data.train`."""
        if self.files.get(split):
            return self._read(self.files[split], f"data.{split}")
        if self._pool is None:
            self._pool = self._read(self.source, self.key)
        val, test = (0.0 if self.files[s] else f for s, f in zip(("val", "test"), self.fractions, strict=True))
        order = split_indices(len(self._pool), val, test, self.split_seed)
        return [self._pool[i] for i in order[("train", "val", "test").index(split)].tolist()]

    def fit(self) -> None:
        """Read the splits, check their labels and fit the tokenizer on the training texts (once)."""
        rows = {split: self.split_rows(split) for split in ("train", "val", "test")}
        self.class_names = sorted({label for _, labels, _ in rows["train"] for label in labels or ()})
        if len(self.class_names) < 2:
            raise ConfigError(f"{self.key}: the training rows have {len(self.class_names)} label; a classifier "
                              "needs two or more")  # fmt: skip
        self.tokenizer = fit_tokenizer([t for t, _, _ in rows["train"]], self.max_words)
        cut = 0
        for split, split_rows in rows.items():
            cut += self.encode_split(split, split_rows)
        if cut:
            total = sum(len(r) for r in rows.values())
            log.info("data.max_length=%d: %d of %d texts were longer and were cut", self.max_length, cut, total)

    def encode_split(self, split: str, rows: list[Row]) -> int:
        """Keep `rows` as token ids and targets; the number of texts cut at max_length. A label the training split
        lacks is refused: the model has no output for it."""
        index = {name: i for i, name in enumerate(self.class_names)}
        for _, labels, where in rows:
            if unknown := [label for label in labels or () if label not in index]:
                raise ConfigError(
                    f"{where}: label {unknown[0]!r} is not in the training rows ({', '.join(self.class_names)}), so "
                    "no model output stands for it; add training rows with it, or drop it from this row"
                )
        assert self.tokenizer is not None
        ids, cut = encode([t for t, _, _ in rows], self.tokenizer, self.max_length)
        hot = torch.zeros(len(rows), len(index))
        for i, (_, labels, _) in enumerate(rows):
            hot[i, [index[label] for label in labels or ()]] = 1.0
        targets = hot if self.multilabel else hot.argmax(dim=1)
        self._splits[split] = (ids, targets)
        return cut

    # ---- what the task is built from ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        if self.tokenizer is None:
            self.fit()
        assert self.tokenizer is not None
        return {
            "vocab_size": len(self.tokenizer["words"]) + 2,
            "max_length": self.max_length,
            "num_classes": len(self.class_names),
            "class_names": list(self.class_names),
            "multilabel": self.multilabel,
        }

    # the tokenizer and the labels travel in the checkpoint (Lightning saves a datamodule's state_dict)
    def state_dict(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "class_names": self.class_names, "multilabel": self.multilabel}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("tokenizer"):
            self.tokenizer = dict(state_dict["tokenizer"])
            self.class_names, self.multilabel = list(state_dict["class_names"]), bool(state_dict["multilabel"])
            self._splits = {}

    # ---- loaders --------------------------------------------------------------------------------------------------
    def split_tensors(self, split: str) -> tuple[list[Tensor], Tensor]:
        """(token ids per text, targets) of a split, read and encoded on first use."""
        if self.tokenizer is None:
            self.fit()
        if split not in self._splits:
            self.encode_split(split, self.split_rows(split))
        return self._splits[split]

    def loader(self, split: str, train: bool) -> DataLoader:
        ids, targets = self.split_tensors(split)
        rows = list(zip(ids, targets, strict=True))
        if train:  # resumable mid-epoch with the collate kept (litforge.data.stateful)
            return stateful_train_loader(
                rows,  # type: ignore[arg-type]  # a list is a map-style dataset
                batch_size=self.batch_size,
                seed=self.shuffle_seed,
                trainer=self.trainer,
                collate_fn=collate,
            )
        return DataLoader(rows, batch_size=self.eval_batch_size, collate_fn=collate)  # type: ignore[arg-type]

    # ---- predict and export ---------------------------------------------------------------------------------------
    def read_inputs(self, path: str) -> tuple[list[str], Tensor]:
        """(`file:line` per text, padded token ids) of a .txt (one text a line), .jsonl or .csv/.tsv file."""
        rows, _ = read_rows(path, self.text, None, self.separator, "input", self.encoding)
        self.describe()
        assert self.tokenizer is not None
        ids, _ = encode([t for t, _, _ in rows], self.tokenizer, self.max_length)
        return [where for _, _, where in rows], pad(ids)

    def example_inputs(self) -> list[ExampleInput]:
        ids, _ = self.split_tensors("test")
        return [ExampleInput("token_ids", pad(ids[:4]), {0: "batch", 1: "length"})]

    def deployment_facts(self) -> dict[str, str]:
        return {"label_names": json.dumps(self.class_names), "tokenizer": json.dumps(self.tokenizer)}
