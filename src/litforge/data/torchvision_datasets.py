"""MNIST, Fashion-MNIST and CIFAR-10 through torchvision's own dataset classes, held in memory as uint8.

torchvision keeps the download code (mirrors, checksums, unpacking); this module only turns its `data`/`targets`
into (N, C, H, W) uint8 tensors for :class:`~litforge.data.base.ImageDataModule`, which is faster than a
per-sample `DataLoader` for datasets this small. Files are downloaded in `prepare_data` (Lightning runs it on one
process per node) and read in `setup` with `download=False`, so data-parallel ranks never download at the same time.

Construction reads nothing and needs no network: shapes, class names and normalisation are fixed per dataset.
When the files are missing and cannot be downloaded (no internet, `download=false`), the :class:`DataError` names
the exact folder and files torchvision looks for, so a user can copy them there from a machine that has internet.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.error import URLError

import torch
import torchvision.datasets
from torch import Tensor

from litforge.core.errors import DataError
from litforge.data.base import ImageDataModule


class TorchvisionImageDataModule(ImageDataModule):
    """Shared code of the torchvision datasets: download, load, convert, and explain what is missing.

    Subclasses set the class attributes and implement the few hooks that differ between the IDX (MNIST family)
    and pickle (CIFAR) formats.
    """

    dataset_class: ClassVar[type[torchvision.datasets.VisionDataset]]  # e.g. torchvision.datasets.MNIST
    display_name: ClassVar[str] = ""  # in messages, e.g. "Fashion-MNIST"
    shape: ClassVar[tuple[int, int, int]] = (1, 1, 1)
    default_mean: ClassVar[tuple[float, ...]] = ()
    default_std: ClassVar[tuple[float, ...]] = ()

    def __init__(
        self,
        download: bool = True,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        # Fixed, well-known statistics of the full training set: runs with different split seeds normalise alike.
        super().__init__(
            mean=list(mean) if mean is not None else list(self.default_mean),
            std=list(std) if std is not None else list(self.default_std),
            **kwargs,
        )
        self.download = download
        self.input_shape = self.shape
        self.class_names = self._class_names()
        self.num_classes = len(self.class_names)
        self._prepared = False

    # ---- per-format hooks -----------------------------------------------------------------------------------------
    def _class_names(self) -> list[str]:
        raise NotImplementedError

    def files_folder(self) -> str:
        """The folder where torchvision reads the (unpacked) files from."""
        raise NotImplementedError

    def expected_files(self) -> list[str]:
        """Names of the unpacked files torchvision needs in :meth:`files_folder`."""
        raise NotImplementedError

    def _archive_hint(self) -> str:
        """Where the downloadable archives can go instead, to be unpacked by `data.download=true` offline."""
        raise NotImplementedError

    def _to_arrays(self, dataset: torchvision.datasets.VisionDataset) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    # ---- shared ---------------------------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """`data_dir` as an absolute path, so messages say exactly where files must go."""
        return os.path.abspath(os.path.expanduser(str(self.data_dir)))

    def prepare_data(self) -> None:
        """Download (and unpack) the files if they are not there yet; does nothing when `download=False`."""
        if not self.download:
            return
        root = Path(self.root)  # the outermost folder the download makes (None: root is there), removed if it fails
        made = next((p for p in [*reversed(root.parents), root] if not p.exists()), None)
        try:
            # one construction downloads both splits: torchvision fetches every file of the dataset at once
            self.dataset_class(root=self.root, train=True, download=True)
        except (RuntimeError, URLError, OSError) as err:
            for folder in sorted(made.glob("**/"), key=lambda p: -len(p.parts)) if made and made.is_dir() else []:
                if not any(folder.iterdir()):  # only empty folders: nothing a user (or a partial download) put there
                    folder.rmdir()
            raise DataError(self._download_failed_message(err)) from err
        self._prepared = True

    def load_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        return self._to_arrays(self._open(train=split == "train"))

    def _open(self, train: bool) -> torchvision.datasets.VisionDataset:
        """torchvision's dataset read from disk without downloading; downloads first if `setup` runs on its own."""
        cls = self.dataset_class
        try:
            return cls(root=self.root, train=train, download=False)
        except RuntimeError as err:  # torchvision: "Dataset not found (or corrupted)"
            if not (self.download and not self._prepared):
                raise DataError(self._missing_message(err)) from err
        except (AssertionError, ValueError, TypeError, KeyError, EOFError, OSError, pickle.UnpicklingError) as err:
            raise DataError(self._corrupt_message(err)) from err
        # `setup` called without `prepare_data` (a notebook, a test, `split_arrays`): download now, then read
        self.prepare_data()
        try:
            return cls(root=self.root, train=train, download=False)
        except RuntimeError as err:
            raise DataError(self._missing_message(err)) from err

    def missing_download(self) -> str | None:
        """(litforge.core.contracts.DownloadsData) The dataset, when its files are not in :meth:`files_folder`."""
        if not self._missing():
            return None
        then = "the job downloads it first (needs internet)" if self.download else "data.download=false: the job fails"
        return f"{self.display_name} is not in {self.files_folder()}: {then}"

    def _missing(self) -> list[str]:
        folder = self.files_folder()
        return [name for name in self.expected_files() if not os.path.isfile(os.path.join(folder, name))]

    def _where(self) -> str:
        return f"{os.path.join(self.files_folder(), '')} ({', '.join(self.expected_files())})"

    def _missing_message(self, err: BaseException) -> str:
        missing = self._missing()
        if missing == self.expected_files():
            problem = f"{self.display_name} files not found in {os.path.join(self.files_folder(), '')}"
        elif missing:
            problem = f"{self.display_name} files are incomplete: {self.files_folder()} lacks {', '.join(missing)}"
        else:  # all there, yet torchvision refused them: CIFAR's checksums differ, or a file is truncated
            problem = (
                f"{self.display_name} files in {self.files_folder()} are corrupted ({_first_line(err)}); "
                f"delete that folder and get them again"
            )
        return (
            f"{problem}. Set data.download=true to download them (needs internet), or copy them from a "
            f"machine with internet to {self._where()}; {self._archive_hint()}"
        )

    def _corrupt_message(self, err: BaseException) -> str:
        return (
            f"{self.display_name} files in {self.files_folder()} could not be read ({type(err).__name__}: "
            f"{_first_line(err)}); they are probably truncated or corrupted: delete that folder and download "
            f"again with data.download=true (needs internet)"
        )

    def _download_failed_message(self, err: BaseException) -> str:
        return (
            f"could not download {self.display_name} into {self.files_folder()} ({type(err).__name__}: "
            f"{_first_line(err)}). data.download=true needs internet access; on an offline machine copy the "
            f"files from a machine with internet to {self._where()}; {self._archive_hint()}"
        )


def _first_line(err: BaseException, limit: int = 200) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = " / ".join(lines[:3]) if lines else repr(err)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _MNISTFormat(TorchvisionImageDataModule):
    """The MNIST family: four IDX files in `<data_dir>/<ClassName>/raw/`, grey 28x28."""

    shape = (1, 28, 28)

    def _class_names(self) -> list[str]:
        return list(self.dataset_class.classes)

    def files_folder(self) -> str:
        return os.path.join(self.root, self.dataset_class.__name__, "raw")

    def expected_files(self) -> list[str]:
        # torchvision reads the unpacked names: train-images-idx3-ubyte, ... (the .gz are only downloaded)
        return [os.path.splitext(name)[0] for name, _ in self.dataset_class.resources]

    def _archive_hint(self) -> str:
        archives = ", ".join(name for name, _ in self.dataset_class.resources)
        return (
            f"or put the archives {archives} in that folder and set data.download=true "
            f"(archives already present are unpacked without internet)"
        )

    def _to_arrays(self, dataset: torchvision.datasets.VisionDataset) -> tuple[Tensor, Tensor]:
        # (N, 28, 28) → (N, 1, 28, 28)
        images = torch.as_tensor(dataset.data, dtype=torch.uint8).unsqueeze(1).contiguous()
        labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
        return images, labels


class MNISTDataModule(_MNISTFormat):
    """MNIST handwritten digits: 60,000 train / 10,000 test grey 28x28 images, 10 classes."""

    dataset_class = torchvision.datasets.MNIST
    display_name = "MNIST"
    default_mean = (0.1307,)
    default_std = (0.3081,)


class FashionMNISTDataModule(_MNISTFormat):
    """Fashion-MNIST (Zalando clothing): 60,000 train / 10,000 test grey 28x28 images, 10 classes."""

    dataset_class = torchvision.datasets.FashionMNIST
    display_name = "Fashion-MNIST"
    default_mean = (0.2860,)
    default_std = (0.3530,)


class CIFAR10DataModule(TorchvisionImageDataModule):
    """CIFAR-10: 50,000 train / 10,000 test RGB 32x32 images, 10 classes.

    The class names are those of `batches.meta`, fixed here so they are known before any file is read.
    """

    dataset_class = torchvision.datasets.CIFAR10
    display_name = "CIFAR-10"
    shape = (3, 32, 32)
    default_mean = (0.4914, 0.4822, 0.4465)
    default_std = (0.2470, 0.2435, 0.2616)
    cifar10_classes: ClassVar[tuple[str, ...]] = tuple(
        "airplane automobile bird cat deer dog frog horse ship truck".split()
    )

    def _class_names(self) -> list[str]:
        return list(self.cifar10_classes)

    def files_folder(self) -> str:
        return os.path.join(self.root, self.dataset_class.base_folder)

    def expected_files(self) -> list[str]:
        cls = self.dataset_class
        return [name for name, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def _archive_hint(self) -> str:
        cls = self.dataset_class
        return (
            f"or put the archive {cls.filename} in {self.root} and set data.download=true "
            f"(an archive already present is unpacked without internet)"
        )

    def _to_arrays(self, dataset: torchvision.datasets.VisionDataset) -> tuple[Tensor, Tensor]:
        # torchvision holds (N, 32, 32, 3) uint8 numpy (HWC); the nets want (N, 3, 32, 32)
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()
        labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
        if tuple(dataset.classes) != self.cifar10_classes:
            raise DataError(
                f"{self.files_folder()}/batches.meta lists classes {list(dataset.classes)}, not "
                f"CIFAR-10's {list(self.cifar10_classes)}; delete that folder and download it again "
                f"with data.download=true"
            )
        return images, labels
