"""`data=csv`: a table of feature columns and one target column, from a CSV/Parquet file or scikit-learn (offline).

The usual preparation, fitted on the training split only and kept as plain data (so it travels in checkpoints,
which load with `weights_only=True`, and predict/export encode new rows exactly as training did):

- number columns: standardised with the training split's mean and std; a missing value becomes that mean (0 after
  standardisation);
- text columns (or those listed in `categorical`): one-hot over the training split's values; a value training never
  saw, or a missing one, is all zeros;
- the target: class names (sorted) for `target_kind=class`, floats for `value` (`auto`: text, few whole numbers, or
  a target listed in `categorical`, is a class); a table that cannot train is refused in one line
  (litforge.data.tables.check_columns).

The loaders serve the encoded but not yet standardised features (missing numbers as NaN); standardisation runs per
batch in `on_after_batch_transfer`, as the image datamodules normalise, so an exported graph can take raw features
and standardise inside (litforge.deploy). scikit-learn's ColumnTransformer does the same fitting, but its fitted
state is a pickled object: it cannot be stored in a `weights_only` checkpoint nor traced into an ONNX graph.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

import torch
from torch import Tensor

from litforge.core.bounds import Count, HeldOut, Seed
from litforge.core.errors import ConfigError
from litforge.data.base import InMemorySplits
from litforge.data.memory import split_indices
from litforge.data.tables import (
    BUNDLED,
    Delimiter,
    Encoding,
    Table,
    bundled_table,
    check_columns,
    read_table,
)

log = logging.getLogger(__name__)


def fit_encoding(table: Table, rows: list[int], features: list[str], categorical: list[str]) -> list[dict[str, Any]]:
    """Per feature column, what encodes it: `{"name", "kind": "number", "mean", "std"}` or `{"name", "kind":
    "category", "values"}`, from the training `rows` only."""
    encoding: list[dict[str, Any]] = []
    for name in features:
        values = [table[name][i] for i in rows]
        text = any(isinstance(v, str) for v in values)
        if name in categorical or text:
            seen = sorted({str(v) for v in values if v is not None})
            encoding.append({"name": name, "kind": "category", "values": seen})
            continue
        present = [float(v) for v in values if v is not None]
        if not present:
            raise ConfigError(f"data.features: column {name!r} has no values in the training split; drop it")
        mean = sum(present) / len(present)
        std = math.sqrt(sum((v - mean) ** 2 for v in present) / len(present))
        encoding.append({"name": name, "kind": "number", "mean": mean, "std": std if std > 0 else 1.0})
    return encoding


def encoded_names(encoding: list[dict[str, Any]]) -> list[str]:
    """The encoded feature vector's column names: a number column as itself, a category as `name=value` each."""
    names: list[str] = []
    for column in encoding:
        names += [column["name"]] if column["kind"] == "number" else [f"{column['name']}={v}" for v in column["values"]]
    return names


def encode(table: Table, encoding: list[dict[str, Any]]) -> Tensor:
    """(rows, features) float32: numbers as they are (NaN where missing), categories one-hot."""
    missing = [c["name"] for c in encoding if c["name"] not in table]
    if missing:
        raise ConfigError(f"the table lacks the feature columns {missing} the model was trained on")
    n = len(next(iter(table.values()))) if table else 0
    parts: list[Tensor] = []
    for column in encoding:
        values = table[column["name"]]
        if column["kind"] == "number":
            try:
                numbers = [math.nan if v is None else float(v) for v in values]
            except ValueError as exc:
                raise ConfigError(f"column {column['name']!r} was numeric in training but holds text: {exc}") from None
            parts.append(torch.tensor(numbers, dtype=torch.float32).view(n, 1))
        else:
            index = {v: i for i, v in enumerate(column["values"])}
            hot = torch.zeros(n, len(index))
            for row, value in enumerate(values):
                if value is not None and str(value) in index:
                    hot[row, index[str(value)]] = 1.0
            parts.append(hot)
    return torch.cat(parts, dim=1) if parts else torch.zeros(n, 0)


def standardization(encoding: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(mean, std) per encoded column: the fitted ones for numbers, (0, 1) for one-hot columns."""
    mean: list[float] = []
    std: list[float] = []
    for column in encoding:
        if column["kind"] == "number":
            mean.append(column["mean"])
            std.append(column["std"])
        else:
            mean += [0.0] * len(column["values"])
            std += [1.0] * len(column["values"])
    return mean, std


def standardize(features: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Missing (NaN) → the training mean, then (x - mean) / std: the same ops in training and in an exported graph."""
    return (torch.where(torch.isnan(features), mean, features) - mean) / std


class TabularDataModule(InMemorySplits):
    """Rows of a table as `(features, target)` batches; `kind = "features"` (what classification and regression
    train on with `model=mlp`).

    A table in another format needs only :meth:`read_file` overridden (docs/extending.md does it for JSON lines):
    the encoding, the splits, the loaders, predict and export come with the class.
    """

    kind = "features"

    def __init__(
        self,
        path: str | None = None,
        dataset: Literal["wine", "diabetes", "breast_cancer", "iris"] = "wine",
        target: str | None = None,
        features: list[str] | None = None,
        categorical: list[str] | None = None,
        target_kind: Literal["auto", "class", "value"] = "auto",
        encoding: Encoding = "auto",
        delimiter: Delimiter = "auto",
        batch_size: Count = 64,
        eval_batch_size: Count | None = None,
        val_fraction: HeldOut = 0.1,
        test_fraction: HeldOut = 0.2,
        split_seed: Seed = 0,
        shuffle_seed: Seed = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or max(batch_size, 256)
        self.shuffle_seed = shuffle_seed
        self.path, self.dataset = path, dataset
        self.file_encoding, self.delimiter = encoding, delimiter  # (self.encoding: the fitted feature encoding)
        table = self.load_table()
        source = f"data.path={path}" if path else f"data.dataset={dataset} (one of {', '.join(BUNDLED)})"
        # the target, the features and the target's kind; a table that cannot train is refused in one line
        self.target, self.feature_columns, self.target_kind = check_columns(
            table, source, target, features, categorical, target_kind
        )
        labelled = [i for i, v in enumerate(table[self.target]) if v is not None]
        if len(labelled) < (rows := len(table[self.target])):  # said, so that a smaller split is no surprise
            log.info(
                "data.target=%s has no value in %d of the %d rows of %s (an empty cell or a missing marker such as "
                "NA): those rows are left out of training, validation and test",
                self.target, rows - len(labelled), rows, source,
            )  # fmt: skip
        table = {name: [table[name][i] for i in labelled] for name in table}  # rows without a target cannot train
        train, val, test = (
            idx.tolist() for idx in split_indices(len(labelled), val_fraction, test_fraction, split_seed)
        )
        self.encoding = fit_encoding(table, train, self.feature_columns, list(categorical or []))
        self.feature_names = encoded_names(self.encoding)
        targets = table[self.target]
        if self.target_kind == "class":
            self.class_names = sorted({str(v) for v in targets}, key=_natural)
            index = {name: i for i, name in enumerate(self.class_names)}
            y = torch.tensor([index[str(v)] for v in targets], dtype=torch.long)
        else:
            try:
                y = torch.tensor([float(v) for v in targets], dtype=torch.float32).view(-1, 1)
            except ValueError:
                raise ConfigError(
                    f"data.target={self.target} holds text, so it cannot be a value; pass data.target_kind=class "
                    "with task=classification"
                ) from None
            self.target_mean = float(y[train].mean())
            self.target_std = float(y[train].std(correction=0)) or 1.0
        x = encode(table, self.encoding)
        self._splits = {name: (x[rows], y[rows]) for name, rows in (("train", train), ("val", val), ("test", test))}
        self._stats: tuple[Tensor, Tensor] | None = None

    def read_file(self, path: str) -> Table:
        """`{column: values}` (numbers, strings, None for missing) of a file: the training table (`data.path`, read
        once at construction) and predict.py's input. CSV and Parquet here; override it for another format."""
        key = "data.path" if path == self.path else "input"
        return read_table(path, self.file_encoding, self.delimiter, key=key)

    def load_table(self) -> Table:
        return self.read_file(self.path) if self.path else bundled_table(self.dataset)

    def read_inputs(self, path: str) -> tuple[list[str], Tensor]:
        """Rows of a file in this datamodule's format with the training feature columns (others, the target too, are
        ignored): (row names, encoded features), for predict.py."""
        table = self.read_file(path)
        rows = len(next(iter(table.values())))
        return [f"{path}:{i + 2}" for i in range(rows)], encode(table, self.encoding)

    # ---- what the task is built from ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"input_shape": [len(self.feature_names)], "feature_names": list(self.feature_names)}
        if self.target_kind == "class":
            return {**facts, "num_classes": len(self.class_names), "class_names": list(self.class_names)}
        return {
            **facts,
            "num_targets": 1,
            "target_names": [self.target],
            "target_mean": [self.target_mean],
            "target_std": [self.target_std],
        }

    # the fitted encoding travels in the checkpoint (Lightning saves a datamodule's state_dict): predict and export
    # encode new rows exactly as training did
    def state_dict(self) -> dict[str, Any]:
        return {"encoding": self.encoding, "feature_names": self.feature_names}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("encoding"):
            self.encoding = list(state_dict["encoding"])
            self.feature_names = list(state_dict["feature_names"])
            self._stats = None

    # ---- helpers for predict and export ---------------------------------------------------------------------------
    def standardization(self) -> tuple[list[float], list[float]]:
        return standardization(self.encoding)

    def normalize(self, features: Tensor) -> Tensor:
        if self._stats is None or self._stats[0].device != features.device:
            mean, std = standardization(self.encoding)
            self._stats = (
                torch.tensor(mean, device=features.device).view(1, -1),
                torch.tensor(std, device=features.device).view(1, -1),
            )
        return standardize(features.float(), *self._stats)

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Encoded (not standardised) features and targets of a split."""
        return self._splits[split]


def _natural(name: str) -> tuple[int, float | str]:
    """Class names in numeric order when they are numbers (`2` before `10`), else alphabetical."""
    try:
        return (0, float(name))
    except ValueError:
        return (1, name)
