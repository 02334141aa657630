"""scikit-learn's handwritten digits: 1,797 real 8x8 grey images that ship inside scikit-learn (no download).

It is the embedded default so that `python train.py` trains on real data on any machine, offline, in seconds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import AfterValidator, Field
from torch import Tensor

from litforge.core.bounds import Count, HeldOut
from litforge.core.errors import ConfigError
from litforge.data.base import ImageDataModule
from litforge.data.memory import split_indices

DIGITS = "a non-empty list of distinct digits in [0, 9]"


def distinct(values: list[int]) -> list[int]:
    """data.classes: each digit once (a repeated one would be two labels for the same images)."""
    if len(set(values)) != len(values):
        raise ValueError("a digit repeats")
    return values


class DigitsDataModule(ImageDataModule):
    """Digits 0-9 as (1, 8, 8) images; a seeded test split is held out since the dataset has none of its own.

    `classes` keeps a subset of the digits (e.g. `[0, 1, 2, 3, 4]`), relabelled 0..k-1 in the order given: the
    transfer-learning recipe pretrains on one half and fine-tunes on the other. `train_per_class` caps the
    training examples per class, for few-shot experiments.
    """

    def __init__(
        self,
        test_fraction: HeldOut = 0.2,
        classes: Annotated[
            list[Annotated[int, Field(ge=0, le=9)]],
            Field(
                min_length=1, description="a non-empty list of distinct digits in [0, 9]", examples=[[5, 6, 7, 8, 9]]
            ),
            AfterValidator(distinct),
        ]
        | None = None,
        train_per_class: Count | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.test_fraction = test_fraction
        self.classes = list(classes) if classes is not None else list(range(10))
        if (
            not self.classes
            or any(not 0 <= c <= 9 for c in self.classes)
            or len(set(self.classes)) != len(self.classes)
        ):
            raise ConfigError(f"data.classes={self.classes} must be distinct digits between 0 and 9, e.g. [5,6,7,8,9]")
        self.train_per_class = train_per_class
        self.input_shape = (1, 8, 8)
        self.num_classes = len(self.classes)
        self.class_names = [str(c) for c in self.classes]
        self._arrays: dict[str, tuple[Tensor, Tensor]] = {}

    def _load_all(self) -> None:
        pixels, target = digits_arrays()
        images = torch.tensor(pixels, dtype=torch.float32).div_(16.0).reshape(-1, 1, 8, 8)  # 0..16 → [0, 1]
        labels = torch.tensor(target, dtype=torch.int64)
        keep = torch.isin(labels, torch.tensor(self.classes))
        images, labels = images[keep], labels[keep]
        remap = torch.full((10,), -1, dtype=torch.int64)
        remap[torch.tensor(self.classes)] = torch.arange(len(self.classes))
        labels = remap[labels]
        train_idx, _, test_idx = split_indices(len(labels), 0.0, self.test_fraction, self.split_seed)
        train_images, train_labels = images[train_idx], labels[train_idx]
        if self.train_per_class is not None:
            # the first k of each class in the (already shuffled) training order
            keep_idx = (
                torch.cat(
                    [
                        torch.nonzero(train_labels == c).flatten()[: self.train_per_class]
                        for c in range(self.num_classes)
                    ]
                )
                .sort()
                .values
            )
            train_images, train_labels = train_images[keep_idx], train_labels[keep_idx]
        self._arrays = {"train": (train_images, train_labels), "test": (images[test_idx], labels[test_idx])}

    def load_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        if not self._arrays:
            self._load_all()
        return self._arrays[split]


def digits_arrays() -> tuple[Any, Any]:
    """(pixels (1797, 64) in 0..16, labels (1797,)) read from the CSV file scikit-learn ships, as its `load_digits`
    reads it, without importing scikit-learn: `import sklearn.datasets` (scipy, joblib, ...) was the largest fixed
    cost of `python train.py`'s start-up after torch and Lightning (~1 s on the project's machine,
    benchmarks/README.md). Falls back to `load_digits` if the file is not where scikit-learn keeps it."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    csv = folder / "datasets" / "data" / "digits.csv.gz" if folder else None
    if csv is None or not csv.is_file():
        from sklearn.datasets import load_digits  # start-up: sklearn.datasets costs every run ~1 s (see above)

        digits = load_digits()
        return digits.data, digits.target
    data = np.loadtxt(csv, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)
