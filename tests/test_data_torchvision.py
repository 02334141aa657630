"""MNIST / Fashion-MNIST / CIFAR-10 datamodules, driven through torchvision's real loading code.

No network here: each test writes a few images in the dataset's native on-disk format, in exactly the folder
torchvision reads (see torchvision/datasets/mnist.py and cifar.py), and `urllib.request.urlopen` is replaced by a
function that fails, so any download attempt is visible and fast instead of hanging.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from litforge.core.errors import DataError
from litforge.data.base import channel_stats
from litforge.data.torchvision_datasets import (
    CIFAR10DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
    TorchvisionImageDataModule,
)

CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---- writing the native formats ------------------------------------------------------------------------------------
def make_images(n: int, shape: tuple[int, ...], seed: int) -> Tensor:
    """Random uint8 images whose first pixel is their index, so every image can be traced after shuffling."""
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    images.view(n, -1)[:, 0] = torch.arange(n, dtype=torch.uint8)
    return images


def write_idx_images(path: Path, images: Tensor) -> None:
    """IDX3: big-endian magic 2051 (uint8, 3 dims), then N, rows, cols, then the pixels row-major."""
    n, rows, cols = images.shape
    path.write_bytes(struct.pack(">IIII", 2051, n, rows, cols) + images.numpy().tobytes())


def write_idx_labels(path: Path, labels: Tensor) -> None:
    """IDX1: big-endian magic 2049 (uint8, 1 dim), then N, then one byte per label."""
    path.write_bytes(struct.pack(">II", 2049, len(labels)) + labels.to(torch.uint8).numpy().tobytes())


def write_mnist(root: Path, folder: str, n_train: int = 30, n_test: int = 10) -> dict[str, tuple[Tensor, Tensor]]:
    """The four unpacked IDX files in `<root>/<folder>/raw/`, where torchvision's `_check_exists` looks."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    arrays: dict[str, tuple[Tensor, Tensor]] = {}
    for prefix, split, n in (("train", "train", n_train), ("t10k", "test", n_test)):
        images = make_images(n, (28, 28), seed=n)
        labels = torch.arange(n, dtype=torch.int64) % 10
        write_idx_images(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx_labels(raw / f"{prefix}-labels-idx1-ubyte", labels)
        arrays[split] = (images.unsqueeze(1), labels)
    return arrays


def write_cifar(root: Path, per_batch: int = 4, n_test: int = 6) -> dict[str, tuple[Tensor, Tensor]]:
    """`cifar-10-batches-py/` with data_batch_1..5, test_batch and batches.meta.

    The real files are Python 2 pickles with str keys, which torchvision reads with `encoding="latin1"` as
    `entry["data"]` / `entry["labels"]`; a Python 3 pickle with str keys (protocol 2) reads the same way. Rows
    are (3072,) uint8: 1024 red, then 1024 green, then 1024 blue values, row-major — i.e. CHW flattened.
    """
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    n_train = 5 * per_batch
    train = make_images(n_train, (3, 32, 32), seed=1)
    train_labels = (torch.arange(n_train) * 3 % 10).to(torch.int64)
    test = make_images(n_test, (3, 32, 32), seed=2)
    test_labels = (torch.arange(n_test) % 10).to(torch.int64)

    def dump(name: str, images: Tensor, labels: Tensor) -> None:
        entry = {"batch_label": name, "data": images.reshape(len(images), -1).numpy(), "labels": labels.tolist()}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f, protocol=2)

    for b in range(5):
        sl = slice(b * per_batch, (b + 1) * per_batch)
        dump(f"data_batch_{b + 1}", train[sl], train_labels[sl])
    dump("test_batch", test, test_labels)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CIFAR_CLASSES, "num_cases_per_batch": per_batch, "num_vis": 3072}, f, protocol=2)
    return {"train": (train, train_labels), "test": (test, test_labels)}


# ---- fixtures ------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every URL torchvision tries to open fails at once (and is recorded), as on a machine without internet."""
    tried: list[str] = []

    def fail(request: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(getattr(request, "full_url", str(request)))
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    return tried


@pytest.fixture
def cifar_without_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision verifies the md5 of every CIFAR batch file and of batches.meta (`CIFAR10._check_integrity` and
    `_load_meta` both call `cifar.check_integrity(path, md5)`), which hand-written files cannot match; keep only
    its file-exists part. Patching the module-level function covers both callers."""
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


def check_roundtrip(dm: TorchvisionImageDataModule, arrays: dict[str, tuple[Tensor, Tensor]]) -> None:
    """Every image of train+val is a written train image with its label; test comes back unchanged, in order."""
    written_images, written_labels = arrays["train"]
    seen: list[int] = []
    for split in ("train", "val"):
        images, labels = dm.split_arrays(split)
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64
        assert tuple(images.shape[1:]) == dm.input_shape
        for image, label in zip(images, labels, strict=True):
            index = int(image.flatten()[0])
            assert torch.equal(image, written_images[index])
            assert int(label) == int(written_labels[index])
            seen.append(index)
    assert sorted(seen) == list(range(len(written_labels)))
    test_images, test_labels = dm.split_arrays("test")
    assert torch.equal(test_images, arrays["test"][0]) and torch.equal(test_labels, arrays["test"][1])


# ---- MNIST family --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("download", [False, True])
@pytest.mark.parametrize(("cls", "folder"), [(MNISTDataModule, "MNIST"), (FashionMNISTDataModule, "FashionMNIST")])
def test_mnist_family_loads_idx_files(
    tmp_path: Path, no_network: list[str], cls: type[TorchvisionImageDataModule], folder: str, download: bool
) -> None:
    import torchvision.datasets

    arrays = write_mnist(tmp_path, folder)
    dm = cls(data_dir=str(tmp_path), download=download, batch_size=8, val_fraction=0.2)
    assert dm.input_shape == (1, 28, 28) and dm.num_classes == 10
    assert dm.class_names == list(getattr(torchvision.datasets, folder).classes)
    dm.prepare_data()
    dm.setup("fit")
    assert no_network == []  # the files were there: torchvision must not have tried to download
    assert len(dm.split_arrays("train")[1]) == 24 and len(dm.split_arrays("val")[1]) == 6
    check_roundtrip(dm, arrays)

    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (8, 1, 28, 28) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    normalized, _ = dm.on_after_batch_transfer((images, labels), 0)
    mean, std = cls.default_mean[0], cls.default_std[0]
    assert torch.allclose(normalized, (images.float() / 255 - mean) / std, atol=1e-5)


def test_setup_without_prepare_data_downloads_nothing_when_files_exist(tmp_path: Path, no_network: list[str]) -> None:
    arrays = write_mnist(tmp_path, "MNIST")
    dm = MNISTDataModule(data_dir=str(tmp_path), download=True)
    dm.setup()  # a notebook or predict script may skip prepare_data
    assert no_network == []
    check_roundtrip(dm, arrays)


def test_given_mean_std_standardise_the_data(tmp_path: Path) -> None:
    write_mnist(tmp_path, "MNIST", n_train=40)
    probe = MNISTDataModule(data_dir=str(tmp_path), download=False, val_fraction=0.0)
    train_images = probe.split_arrays("train")[0]
    mean, std = channel_stats(train_images)
    dm = MNISTDataModule(data_dir=str(tmp_path), download=False, val_fraction=0.0, mean=mean, std=std, batch_size=64)
    dm.setup()
    images, labels = next(iter(dm.train_dataloader()))
    normalized, _ = dm.on_after_batch_transfer((images, labels), 0)
    assert abs(normalized.mean().item()) < 1e-4 and abs(normalized.std().item() - 1) < 1e-3


def test_construction_reads_nothing(tmp_path: Path, no_network: list[str]) -> None:
    for cls in (MNISTDataModule, FashionMNISTDataModule, CIFAR10DataModule):
        dm = cls(data_dir=str(tmp_path / "nothing-here"), download=True)
        assert dm.num_classes == 10 and len(dm.class_names) == 10
    assert CIFAR10DataModule(data_dir=str(tmp_path)).input_shape == (3, 32, 32)
    assert not (tmp_path / "nothing-here").exists() and no_network == []


# ---- CIFAR-10 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("download", [False, True])
def test_cifar10_loads_pickle_batches(
    tmp_path: Path, no_network: list[str], cifar_without_md5: None, download: bool
) -> None:
    arrays = write_cifar(tmp_path)
    dm = CIFAR10DataModule(data_dir=str(tmp_path), download=download, batch_size=4, val_fraction=0.25)
    assert dm.class_names == CIFAR_CLASSES and dm.input_shape == (3, 32, 32)
    dm.prepare_data()
    dm.setup("fit")
    assert no_network == []
    assert len(dm.split_arrays("train")[1]) == 15 and len(dm.split_arrays("val")[1]) == 5
    check_roundtrip(dm, arrays)  # also proves the HWC → CHW permute puts every channel back in place

    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    normalized, _ = dm.on_after_batch_transfer((images, labels), 0)
    mean = torch.tensor(CIFAR10DataModule.default_mean).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10DataModule.default_std).view(1, 3, 1, 1)
    assert torch.allclose(normalized, (images.float() / 255 - mean) / std, atol=1e-5)


def test_cifar10_checksum_mismatch_is_reported_as_corrupted(tmp_path: Path, no_network: list[str]) -> None:
    write_cifar(tmp_path)  # without the md5 patch: these files cannot match the real checksums
    dm = CIFAR10DataModule(data_dir=str(tmp_path), download=False)
    with pytest.raises(DataError, match="corrupted") as info:
        dm.setup()
    assert str(tmp_path / "cifar-10-batches-py") in str(info.value)


# ---- missing files -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cls", "folder", "a_file"),
    [
        (MNISTDataModule, os.path.join("MNIST", "raw"), "train-images-idx3-ubyte"),
        (FashionMNISTDataModule, os.path.join("FashionMNIST", "raw"), "t10k-labels-idx1-ubyte"),
        (CIFAR10DataModule, "cifar-10-batches-py", "data_batch_1"),
    ],
)
@pytest.mark.parametrize("call_prepare_data", [True, False])
def test_offline_download_fails_with_the_folder_to_fill(
    tmp_path: Path,
    no_network: list[str],
    cls: type[TorchvisionImageDataModule],
    folder: str,
    a_file: str,
    call_prepare_data: bool,
) -> None:
    dm = cls(data_dir=str(tmp_path / "data"), download=True)
    with pytest.raises(DataError) as info:
        if call_prepare_data:
            dm.prepare_data()
        dm.setup()
    message = str(info.value)
    assert no_network, "torchvision should have tried to download"
    assert str(tmp_path / "data" / folder) in message and a_file in message
    assert "internet" in message and "data.download=true" in message
    assert not (tmp_path / "data").exists(), "the failed download left its empty folders behind"


@pytest.mark.parametrize(
    ("cls", "folder"),
    [(MNISTDataModule, os.path.join("MNIST", "raw")), (CIFAR10DataModule, "cifar-10-batches-py")],
)
def test_missing_files_without_download(
    tmp_path: Path, no_network: list[str], cls: type[TorchvisionImageDataModule], folder: str
) -> None:
    dm = cls(data_dir=str(tmp_path), download=False)
    dm.prepare_data()  # download=False: nothing to do, no error yet
    with pytest.raises(DataError, match="data.download=true") as info:
        dm.setup()
    assert str(tmp_path / folder) in str(info.value) and "not found" in str(info.value)
    assert no_network == []


def test_missing_message_lists_only_the_missing_files(tmp_path: Path) -> None:
    write_mnist(tmp_path, "MNIST")
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match=r"incomplete: .* lacks t10k-labels-idx1-ubyte\.") as info:
        MNISTDataModule(data_dir=str(tmp_path), download=False).setup()
    assert "train-images-idx3-ubyte.gz" in str(info.value)  # the archive alternative is named too


def test_truncated_idx_file_is_a_data_error(tmp_path: Path) -> None:
    write_mnist(tmp_path, "MNIST")
    path = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DataError, match="corrupted"):
        MNISTDataModule(data_dir=str(tmp_path), download=False).setup()


def test_archives_already_present_are_unpacked_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[str], cifar_without_md5: None
) -> None:
    """What the error messages promise: archives copied into the folder need no internet with download=true.

    torchvision's `download_url` skips the download when the archive passes `utils.check_integrity(path, md5)`;
    hand-made archives cannot match the real md5, so that check is reduced to "the file exists"."""
    import torchvision.datasets.utils as tv_utils

    monkeypatch.setattr(tv_utils, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    mnist_arrays = write_mnist(tmp_path, "MNIST")
    raw = tmp_path / "MNIST" / "raw"
    for path in list(raw.iterdir()):
        (raw / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    cifar_arrays = write_cifar(tmp_path / "unpacked")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "unpacked" / "cifar-10-batches-py", arcname="cifar-10-batches-py")

    for dm, arrays in (
        (MNISTDataModule(data_dir=str(tmp_path)), mnist_arrays),
        (CIFAR10DataModule(data_dir=str(tmp_path)), cifar_arrays),
    ):
        dm.prepare_data()
        dm.setup()
        check_roundtrip(dm, arrays)
    assert no_network == []
