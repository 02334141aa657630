"""A CSV file of numbers as a datamodule: one row per example, one named column the target to predict."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from litforge.data.base import split_indices
from litforge.data.loader import InMemoryLoader
from litforge.errors import DataError


class CsvDataModule(pl.LightningDataModule):
    """Rows of a CSV file with a header line; features are standardised with the training rows' mean and std."""

    kind = "tabular"  # trains with tasks whose data_kind is "tabular"; the training job refuses any other pair

    def __init__(self, path: str, target: str, batch_size: int = 32, val_fraction: float = 0.1,
                 test_fraction: float = 0.2, split_seed: int = 0, shuffle_seed: int = 0) -> None:
        super().__init__()
        self.batch_size = batch_size  # part of the contract: steps_per_call slices its batches by it
        self.shuffle_seed = shuffle_seed
        header, rows = read_csv(Path(path))
        if target not in header:
            raise DataError(f"data.target={target!r} is not a column of {path}; its columns: {', '.join(header)}")
        t = header.index(target)
        self.feature_names = header[:t] + header[t + 1:]
        table = torch.tensor(rows, dtype=torch.float32)
        features, targets = torch.cat([table[:, :t], table[:, t + 1:]], dim=1), table[:, t:t + 1]
        train, val, test = split_indices(len(rows), val_fraction, test_fraction, split_seed)
        mean, std = features[train].mean(0), features[train].std(0).clamp_min(1e-6)
        features = (features - mean) / std
        self.splits = {"train": (features[train], targets[train]), "val": (features[val], targets[val]),
                       "test": (features[test], targets[test])}

    def describe(self) -> dict[str, Any]:
        """Shape facts, known at construction: the task builds its net from them before any step runs."""
        return {"num_features": len(self.feature_names), "feature_names": self.feature_names}

    def _loader(self, split: str, train: bool) -> InMemoryLoader:
        # litforge's in-memory loader: whole-batch slices, its position saved in checkpoints (exact mid-epoch
        # resume), one shard per data-parallel rank
        replicas = self.trainer.distributed_sampler_kwargs if self.trainer is not None else None
        return InMemoryLoader(self.splits[split], batch_size=self.batch_size, shuffle=train, seed=self.shuffle_seed,
                              rank=replicas["rank"] if replicas else 0,
                              world_size=replicas["num_replicas"] if replicas else 1)

    def train_dataloader(self) -> InMemoryLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> InMemoryLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> InMemoryLoader:
        return self._loader("test", train=False)


def read_csv(path: Path) -> tuple[list[str], list[list[float]]]:
    """The header and the rows as floats; a cell that is not a number is a DataError naming its line."""
    if not path.is_file():
        raise DataError(f"data.path={path} is not a file: pass data.path=<a CSV file with a header line>")
    with path.open(newline="") as f:
        header, *lines = list(csv.reader(f))
    try:
        return header, [[float(cell) for cell in line] for line in lines if line]
    except ValueError as exc:
        raise DataError(f"{path}: every cell below the header must be a number ({exc})") from None
