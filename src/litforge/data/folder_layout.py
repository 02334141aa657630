"""Scanning a folder of class folders: which layout it is, its classes, its first image and its seeded splits.

Why a module of its own: all of this reads names only (folder listings, no pixel), so it is cheap and can run in
the datamodule's constructor, where every layout mistake is reported with the folder to fix before a net is built.
Decoding and serving are :mod:`litforge.data.image_folder`'s.

Two layouts are accepted:

- `root/<class>/*.png`: one pool, split into train/val/test with `test_fraction`, `val_fraction` and `split_seed`;
- `root/train/<class>/*.png`, plus optional `root/val/<class>/…` and `root/test/<class>/…`: the given folders are
  used as they are, and a missing val or test split is carved out of train with the fractions and the seed.

Class names are the sorted folder names (torchvision's `find_classes`, hidden folders such as `.ipynb_checkpoints`
left out), the files those of torchvision's `make_dataset` (its image extensions, sorted, symlinks followed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import Tensor
from torchvision.datasets.folder import find_classes, make_dataset

from litforge.core.errors import DataError
from litforge.data.base import fold_indices
from litforge.data.images import image_extensions
from litforge.data.memory import split_indices

SPLIT_FOLDERS = ("train", "val", "test")

#: (file path, class index) pairs, in folder order
Samples = list[tuple[str, int]]


@dataclass(frozen=True)
class FolderLayout:
    """What a scan of `root` found: `split_dirs` is {"train": dir, "val": dir, "test": dir} for the split layout
    (val/test optional) and {} for the flat one; `first_image` is the first file of the first class."""

    root: str
    split_dirs: dict[str, str]
    class_names: list[str]
    first_image: str

    @classmethod
    def scan(cls, root: str) -> FolderLayout:
        """Check the layout of `root` and find its classes and first image; a DataError names what to fix."""
        split_dirs = _find_split_dirs(root)
        class_dir = split_dirs.get("train", root)
        class_names = _find_classes(class_dir)
        for split in ("val", "test"):
            if split in split_dirs:
                unknown = sorted(set(_visible_subfolders(split_dirs[split])) - set(class_names))
                if unknown:
                    raise DataError(
                        f"{split_dirs[split]} has class folder(s) {', '.join(unknown)} that "
                        f"{split_dirs['train']} lacks; every class needs training images"
                    )
        return cls(root, split_dirs, class_names, _first_image(class_dir, class_names))

    def samples(
        self, val_fraction: float, test_fraction: float, split_seed: int, folds: tuple[int, int] | None = None
    ) -> dict[str, Samples]:
        """Every split's (path, label) list; deterministic given the files and `split_seed`, in folder order.

        `folds=(K, i)`: K-fold cross-validation, fold i is validation; the pool is the training images (and the
        val/ folder's, when there is one), stratified by class; the test split is chosen as without folds.
        """
        if self.split_dirs:
            train = self._list(self.split_dirs["train"], allow_empty=False)
            test_dir = self.split_dirs.get("test")
            test = self._list(test_dir, allow_empty=True) if test_dir is not None else None
        else:
            train, test = self._list(self.root, allow_empty=False), None
        if test is None:
            train_idx, _, test_idx = split_indices(len(train), 0.0, test_fraction, split_seed)
            train, test = _pick(train, train_idx), _pick(train, test_idx)
        if folds is not None:
            if "val" in self.split_dirs:
                train = sorted(train + self._list(self.split_dirs["val"], allow_empty=True))
            train_idx, val_idx = fold_indices(torch.tensor([label for _, label in train]), *folds, split_seed)
            train, val = _pick(train, train_idx), _pick(train, val_idx)
        elif "val" in self.split_dirs:
            val = self._list(self.split_dirs["val"], allow_empty=True)
        else:
            train_idx, val_idx, _ = split_indices(len(train), val_fraction, 0.0, split_seed)
            train, val = _pick(train, train_idx), _pick(train, val_idx)
        if not train:
            raise DataError(
                f"no training images are left in {self.root} after holding out "
                f"data.test_fraction={test_fraction} and data.val_fraction={val_fraction}; "
                f"add images or lower the fractions"
            )
        return {"train": train, "val": val, "test": test}

    def _list(self, directory: str, allow_empty: bool) -> Samples:
        class_to_idx = {name: i for i, name in enumerate(self.class_names)}
        try:
            return make_dataset(directory, class_to_idx, extensions=image_extensions(), allow_empty=allow_empty)
        except FileNotFoundError as err:  # a class folder emptied since the scan
            raise DataError(f"{directory}: {err}; add images to those class folders or remove them") from err


def _find_split_dirs(root: str) -> dict[str, str]:
    example = os.path.join(root, "cat", "001.png")
    if not os.path.exists(root):
        raise DataError(
            f"data folder {root} does not exist; create it with one sub-folder per class, e.g. "
            f"{example} (or point data.root at your images)"
        )
    if not os.path.isdir(root):
        raise DataError(
            f"data folder {root} is a file, not a folder; data.root must be a folder with one "
            f"sub-folder per class, e.g. {example}"
        )
    folders = set(_visible_subfolders(root))
    splits = folders & set(SPLIT_FOLDERS)
    if not splits:
        return {}
    if "train" not in splits:
        raise DataError(
            f"{root} has {'/ and '.join(sorted(splits))}/ but no train/ folder; put the "
            f"training images in {os.path.join(root, 'train', '<class>')}/ (or, without "
            f"train/val/test folders, put the class folders directly in {root})"
        )
    others = sorted(folders - set(SPLIT_FOLDERS))
    if others:
        hint = " (rename it to val)" if {"valid", "validation"} & set(others) else ""
        raise DataError(
            f"{root} mixes two layouts: it has train/ and also the folder(s) {', '.join(others)}"
            f"{hint}; use either {root}/train/<class>/… (with optional val/ and test/) or "
            f"{root}/<class>/…"
        )
    return {split: os.path.join(root, split) for split in SPLIT_FOLDERS if split in splits}


def _find_classes(directory: str) -> list[str]:
    try:
        classes, _ = find_classes(directory)
    except FileNotFoundError:
        classes = []
    classes = [c for c in classes if not c.startswith(".")]
    if not classes:
        raise DataError(
            f"data folder {directory} has no class sub-folders; put the images in one sub-folder per "
            f"class, e.g. {os.path.join(directory, 'cat', '001.png')}"
        )
    return classes


def _first_image(directory: str, class_names: list[str]) -> str:
    """The first image of the first class (make_dataset's order); every class must have one."""
    extensions = image_extensions()
    firsts = {name: _first_file(os.path.join(directory, name), extensions) for name in class_names}
    empty = [os.path.join(directory, name) for name, first in firsts.items() if first is None]
    kinds = ", ".join(extensions)
    if len(empty) == len(firsts):
        raise DataError(
            f"data folder {directory} has class folders but no images ({kinds}); put the images in "
            f"them, e.g. {os.path.join(directory, class_names[0], '001.png')}"
        )
    if empty:
        raise DataError(
            f"class folder(s) {', '.join(empty)} have no images ({kinds}); add images to them or remove them"
        )
    return next(first for first in firsts.values() if first is not None)


def _visible_subfolders(directory: str) -> list[str]:
    """Sub-folder names, without hidden ones (.ipynb_checkpoints, .git, ...)."""
    return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))


def _first_file(directory: str, extensions: tuple[str, ...]) -> str | None:
    """The first image file in make_dataset's walk order, stopping there (a class may hold many files)."""
    for root, dirs, names in os.walk(directory, followlinks=True):
        dirs.sort()  # walk top-down in sorted order, and stop at the first hit instead of listing everything
        for name in sorted(names):
            if name.lower().endswith(extensions):
                return os.path.join(root, name)
    return None


def _pick(samples: Samples, indices: Tensor) -> Samples:
    """The samples at `indices`, kept in folder order so splits list files predictably."""
    return [samples[i] for i in sorted(indices.tolist())]
