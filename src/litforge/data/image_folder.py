"""The user's own images, one sub-folder per class, as in torchvision's `ImageFolder`.

Two layouts are accepted:

- `root/<class>/*.png`: one pool, split into train/val/test with `test_fraction`, `val_fraction` and `split_seed`;
- `root/train/<class>/*.png`, plus optional `root/val/<class>/…` and `root/test/<class>/…`: the given folders are
  used as they are, and a missing val or test split is carved out of train with the fractions and the seed.

Class names are the sorted folder names (torchvision's `find_classes`, hidden folders such as `.ipynb_checkpoints`
left out), the files those of torchvision's `make_dataset` (its image extensions, sorted, symlinks followed).

The shape is known right after construction, from the folder names and ONE image header, so the task can build its
net before any pixel is decoded. `setup` then decides how to serve the data: a dataset that fits in
`max_in_memory_mb` as uint8 is decoded once into tensors and served by the base class's fast
:class:`~litforge.data.loader.InMemoryLoader`; a bigger one is streamed from disk by a `torch.utils.data.DataLoader`
with `num_workers` processes. Both paths produce the same uint8 (C, H, W) images through :func:`load_image_tensor`,
which prediction code reuses so an image file becomes exactly what the net saw in training.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from litforge.data.base import ImageDataModule, channel_stats, split_indices
from litforge.data.loader import InMemoryLoader
from litforge.errors import ConfigError, DataError

# PIL modes holding one value per pixel; every other mode (RGB, RGBA, P, CMYK, YCbCr, ...) becomes 3 channels
GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
SPLIT_FOLDERS = ("train", "val", "test")
STATS_SAMPLE = 2048  # images used to estimate mean/std when streaming (decoding all of a big set would be slow)


def image_extensions() -> tuple[str, ...]:
    """The file endings torchvision's ImageFolder treats as images (.jpg, .png, ...)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return tuple(IMG_EXTENSIONS)


def mode_channels(mode: str) -> int:
    """Channels a PIL mode becomes when channels are not given: grey modes 1, everything else 3 (RGB)."""
    return 1 if mode in GREY_MODES else 3


def parse_image_size(image_size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """`32` → (32, 32); `[h, w]` → (h, w); None stays None (keep the native size). Accepts Hydra's ListConfig."""
    if image_size is None:
        return None
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        size = [image_size, image_size]
    elif isinstance(image_size, str):
        size = []
    else:
        try:
            size = list(image_size)
        except TypeError:
            size = []
    if len(size) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise ConfigError(f"data.image_size={image_size!r} must be a positive int (square images, e.g. 32), a "
                          f"[height, width] pair (e.g. [32,48]) or null (keep the images' own size)")
    return size[0], size[1]


def check_channels(channels: int | None) -> None:
    """Only grey (1) and RGB (3) exist as conversions; anything else is a config mistake."""
    if channels is not None and (isinstance(channels, bool) or channels not in (1, 3)):
        raise ConfigError(f"data.channels={channels!r} is not supported; use 1 (grey), 3 (RGB) or null (from the "
                          f"first image)")


def open_image(path: str) -> Image.Image:
    """Decode an image file completely, or raise a DataError that names the file."""
    try:
        with Image.open(path) as img:
            img.load()  # decode now: a truncated file must fail here, naming the file, not later in a transform
            return img
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise DataError(f"{path} is not a readable image ({type(err).__name__}: {err}); delete or replace "
                        f"it") from err


def image_to_tensor(img: Image.Image, channels: int, size_hw: tuple[int, int] | None) -> Tensor:
    """PIL image → uint8 (C, H, W): converted to grey (1) or RGB (3, alpha dropped), then resized to `size_hw`
    (bilinear, no aspect-ratio preserving crop) when it differs. 16-bit grey (PNG, TIFF) keeps its top 8 bits;
    PIL's own conversion would clip every value above 255 to white."""
    if img.mode.startswith("I;16") or img.mode == "I":
        img = Image.fromarray((np.array(img).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8), "L")
    img = img.convert("L" if channels == 1 else "RGB")
    if size_hw is not None and (img.height, img.width) != size_hw:
        img = img.resize((size_hw[1], size_hw[0]), Image.Resampling.BILINEAR)
    array = torch.from_numpy(np.array(img, dtype=np.uint8))
    return (array.unsqueeze(0) if array.ndim == 2 else array.permute(2, 0, 1)).contiguous()


def load_image_tensor(path: str, channels: int, image_size: int | Sequence[int] | None = None) -> Tensor:
    """Any image file → uint8 (C, H, W), converted exactly as in training.

    Prediction code should pass the datamodule's own shape, `channels=dm.input_shape[0]` and
    `image_size=dm.input_shape[1:]`: training either resized every image to that size or kept a native size that
    every image shares, so the result always fits the net (a same-size image is not resampled).
    """
    check_channels(channels)
    return image_to_tensor(open_image(os.fspath(path)), channels, parse_image_size(image_size))


def _size_text(size_hw: tuple[int, int]) -> str:
    return f"{size_hw[0]}x{size_hw[1]}"


def mixed_sizes_message(ref_path: str, ref_hw: tuple[int, int], path: str, hw: tuple[int, int]) -> str:
    suggestion = str(ref_hw[0]) if ref_hw[0] == ref_hw[1] else f"[{ref_hw[0]},{ref_hw[1]}]"
    return (f"images have different sizes ({ref_path}: {_size_text(ref_hw)}, {path}: {_size_text(hw)}, height x "
            f"width); set data.image_size={suggestion} to resize them all to {_size_text(ref_hw)}")


def mixed_modes_message(ref_path: str, ref_mode: str, path: str, mode: str) -> str:
    def describe(m: str) -> str:
        return f"{m} = {'grey' if mode_channels(m) == 1 else 'colour'}"

    return (f"images have different colour modes ({ref_path}: {describe(ref_mode)}, {path}: {describe(mode)}); set "
            f"data.channels=3 to convert them all to RGB (or data.channels=1 for grey)")


class ImageFileDataset(Dataset):
    """(path, label) samples → (uint8 (C, H, W) tensor, label), with the consistency checks of the datamodule.

    `ref` is the reference image (path, (h, w), mode) that fixed the shape: when `image_size` is None every image
    must have its size, and when `check_mode` every image must have its number of channels. Top-level and plain,
    so DataLoader worker processes can pickle it.
    """

    def __init__(
        self,
        samples: list[tuple[str, int]],
        channels: int,
        image_size: tuple[int, int] | None,
        ref: tuple[str, tuple[int, int], str],
        check_mode: bool,
    ) -> None:
        self.samples = samples
        self.channels = channels
        self.image_size = image_size
        self.ref = ref
        self.check_mode = check_mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        path, label = self.samples[index]
        img = open_image(path)
        ref_path, ref_hw, ref_mode = self.ref
        if self.check_mode and mode_channels(img.mode) != mode_channels(ref_mode):
            raise DataError(mixed_modes_message(ref_path, ref_mode, path, img.mode))
        if self.image_size is None and (img.height, img.width) != ref_hw:
            raise DataError(mixed_sizes_message(ref_path, ref_hw, path, (img.height, img.width)))
        return image_to_tensor(img, self.channels, self.image_size), label


class ImageFolderDataModule(ImageDataModule):
    """Classification data from `root/<class>/<image>` (or `root/train|val|test/<class>/<image>`).

    `image_size` None keeps the native size (then all images must share it); `channels` None takes grey (1) or
    RGB (3) from the first image (then all images must agree). Data up to `max_in_memory_mb` (as uint8) is held in
    memory; bigger data is streamed from disk by `num_workers` DataLoader workers. `mean`/`std` default to the
    training split's statistics (estimated on a seeded sample of 2048 images when streaming).
    """

    def __init__(
        self,
        root: str,
        image_size: int | Sequence[int] | None = None,
        channels: int | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        shuffle_seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        augment: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        max_in_memory_mb: float = 256.0,
        on_device: bool = False,
    ) -> None:
        super().__init__(
            data_dir=str(root),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            val_fraction=val_fraction,
            split_seed=split_seed,
            shuffle_seed=shuffle_seed,
            mean=list(mean) if mean is not None else None,
            std=list(std) if std is not None else None,
            augment=augment,
            on_device=on_device,
        )
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 <= value < 1:
                raise ConfigError(f"data.{name}={value} must be at least 0 and below 1, e.g. 0.1")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"data.num_workers={num_workers!r} must be 0 (load in the main process) or more")
        check_channels(channels)
        self.root = os.path.abspath(os.path.expanduser(str(root)))
        self.image_size = parse_image_size(image_size)
        self.test_fraction = test_fraction
        self.num_workers = num_workers
        self.max_in_memory_mb = max_in_memory_mb

        self._split_dirs = self._find_layout()
        class_dir = self._split_dirs.get("train", self.root)
        self.class_names = self._find_classes(class_dir)
        self._class_to_idx = {name: i for i, name in enumerate(self.class_names)}
        self.num_classes = len(self.class_names)
        self._check_eval_classes()
        ref_path = self._first_image(class_dir)
        ref_hw, ref_mode = self._read_header(ref_path)
        self._ref = (ref_path, ref_hw, ref_mode)
        self._check_mode = channels is None
        self.channels = channels if channels is not None else mode_channels(ref_mode)
        height, width = self.image_size or ref_hw
        self.input_shape = (self.channels, height, width)
        for name, value in (("mean", mean), ("std", std)):
            if value is not None and len(value) != self.channels:
                raise ConfigError(f"data.{name} has {len(value)} values but the images have {self.channels} "
                                  f"channel(s); give {self.channels} values or null (computed from the data)")

        self.in_memory: bool | None = None  # decided in setup
        self._samples: dict[str, list[tuple[str, int]]] = {}
        self._datasets: dict[str, ImageFileDataset] = {}

    # ---- scanning (cheap: names and one header) -------------------------------------------------------------------
    def _find_layout(self) -> dict[str, str]:
        """{"train": dir, "val": dir, "test": dir} for the split layout (val/test optional), {} for the flat one."""
        example = os.path.join(self.root, "cat", "001.png")
        if not os.path.exists(self.root):
            raise DataError(f"data folder {self.root} does not exist; create it with one sub-folder per class, e.g. "
                            f"{example} (or point data.root at your images)")
        if not os.path.isdir(self.root):
            raise DataError(f"data folder {self.root} is a file, not a folder; data.root must be a folder with one "
                            f"sub-folder per class, e.g. {example}")
        folders = set(_visible_subfolders(self.root))
        splits = folders & set(SPLIT_FOLDERS)
        if not splits:
            return {}
        if "train" not in splits:
            raise DataError(f"{self.root} has {'/ and '.join(sorted(splits))}/ but no train/ folder; put the "
                            f"training images in {os.path.join(self.root, 'train', '<class>')}/ (or, without "
                            f"train/val/test folders, put the class folders directly in {self.root})")
        others = sorted(folders - set(SPLIT_FOLDERS))
        if others:
            hint = " (rename it to val)" if {"valid", "validation"} & set(others) else ""
            raise DataError(f"{self.root} mixes two layouts: it has train/ and also the folder(s) {', '.join(others)}"
                            f"{hint}; use either {self.root}/train/<class>/… (with optional val/ and test/) or "
                            f"{self.root}/<class>/…")
        return {split: os.path.join(self.root, split) for split in SPLIT_FOLDERS if split in splits}

    def _find_classes(self, directory: str) -> list[str]:
        from torchvision.datasets.folder import find_classes

        try:
            classes, _ = find_classes(directory)
        except FileNotFoundError:
            classes = []
        classes = [c for c in classes if not c.startswith(".")]
        if not classes:
            raise DataError(f"data folder {directory} has no class sub-folders; put the images in one sub-folder per "
                            f"class, e.g. {os.path.join(directory, 'cat', '001.png')}")
        return classes

    def _check_eval_classes(self) -> None:
        for split in ("val", "test"):
            if split in self._split_dirs:
                unknown = sorted(set(_visible_subfolders(self._split_dirs[split])) - set(self.class_names))
                if unknown:
                    raise DataError(f"{self._split_dirs[split]} has class folder(s) {', '.join(unknown)} that "
                                    f"{self._split_dirs['train']} lacks; every class needs training images")

    def _first_image(self, directory: str) -> str:
        """The first image of the first class (make_dataset's order); every class must have one."""
        extensions = image_extensions()
        firsts = {name: _first_file(os.path.join(directory, name), extensions) for name in self.class_names}
        empty = [os.path.join(directory, name) for name, first in firsts.items() if first is None]
        kinds = ", ".join(extensions)
        if len(empty) == len(firsts):
            raise DataError(f"data folder {directory} has class folders but no images ({kinds}); put the images in "
                            f"them, e.g. {os.path.join(directory, self.class_names[0], '001.png')}")
        if empty:
            raise DataError(f"class folder(s) {', '.join(empty)} have no images ({kinds}); add images to them or "
                            f"remove them")
        return next(first for first in firsts.values() if first is not None)

    @staticmethod
    def _read_header(path: str) -> tuple[tuple[int, int], str]:
        """Size (h, w) and mode from the header alone; no pixel is decoded."""
        try:
            with Image.open(path) as img:
                return (img.height, img.width), img.mode
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise DataError(f"{path} is not a readable image ({type(err).__name__}: {err}); delete or replace "
                            f"it") from err

    # ---- splits ---------------------------------------------------------------------------------------------------
    def _make_dataset(self, directory: str, allow_empty: bool) -> list[tuple[str, int]]:
        from torchvision.datasets.folder import make_dataset

        try:
            return make_dataset(directory, self._class_to_idx, extensions=image_extensions(), allow_empty=allow_empty)
        except FileNotFoundError as err:  # a class folder emptied since construction
            raise DataError(f"{directory}: {err}; add images to those class folders or remove them") from err

    def _scan(self) -> dict[str, list[tuple[str, int]]]:
        """Every split's (path, label) list; deterministic given the files and `split_seed`, in folder order."""
        if self._samples:
            return self._samples
        if self._split_dirs:
            train = self._make_dataset(self._split_dirs["train"], allow_empty=False)
            test_dir = self._split_dirs.get("test")
            test = self._make_dataset(test_dir, allow_empty=True) if test_dir is not None else None
        else:
            train, test = self._make_dataset(self.root, allow_empty=False), None
        if test is None:
            train_idx, _, test_idx = split_indices(len(train), 0.0, self.test_fraction, self.split_seed)
            train, test = _pick(train, train_idx), _pick(train, test_idx)
        if "val" in self._split_dirs:
            val = self._make_dataset(self._split_dirs["val"], allow_empty=True)
        else:
            train_idx, val_idx, _ = split_indices(len(train), self.val_fraction, 0.0, self.split_seed)
            train, val = _pick(train, train_idx), _pick(train, val_idx)
        if not train:
            raise DataError(f"no training images are left in {self.root} after holding out "
                            f"data.test_fraction={self.test_fraction} and data.val_fraction={self.val_fraction}; "
                            f"add images or lower the fractions")
        self._samples = {"train": train, "val": val, "test": test}
        return self._samples

    def split_samples(self, split: str) -> list[tuple[str, int]]:
        """The (file path, label) pairs of "train", "val" or "test", e.g. to name the files of test predictions."""
        return list(self._scan()[split])

    def _dataset(self, split: str) -> ImageFileDataset:
        return ImageFileDataset(self._scan()[split], self.channels, self.image_size, self._ref, self._check_mode)

    def _decode(self, dataset: Dataset) -> tuple[Tensor, Tensor]:
        """Decode a whole dataset into (uint8 images, int64 labels), with `num_workers` processes."""
        if len(dataset) == 0:  # type: ignore[arg-type]
            return torch.empty((0, *self.input_shape), dtype=torch.uint8), torch.empty(0, dtype=torch.int64)
        loader = DataLoader(dataset, batch_size=256, shuffle=False, num_workers=self.num_workers)
        images, labels = zip(*loader)
        return torch.cat(images), torch.cat(labels).to(torch.int64)

    def load_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Decoded images and labels of "train", "val" or "test" (the final splits, val already held out)."""
        return self._decode(self._dataset(split))

    # ---- Lightning hooks ------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Scan the files, then hold them in memory if they fit in `max_in_memory_mb`, else stream them."""
        if self.in_memory is not None:
            return
        samples = self._scan()
        n_bytes = sum(len(s) for s in samples.values()) * int(np.prod(self.input_shape))
        in_memory = n_bytes <= self.max_in_memory_mb * 2**20
        need_stats = self._mean is None or self._std is None
        if in_memory:
            splits = {split: self.load_arrays(split) for split in SPLIT_FOLDERS}
            self._check_shapes(splits)
            if need_stats:
                self._mean, self._std = channel_stats(splits["train"][0])
            self._splits = splits
        else:
            self._datasets = {split: self._dataset(split) for split in SPLIT_FOLDERS}
            if need_stats:  # a seeded sample of the training split: decoding all of a big dataset would be slow
                train = self._datasets["train"]
                generator = torch.Generator().manual_seed(self.split_seed)
                pick = torch.randperm(len(train), generator=generator)[:STATS_SAMPLE].sort().values
                sample = self._decode(torch.utils.data.Subset(train, pick.tolist()))[0]
                self._mean, self._std = channel_stats(sample)
        self.in_memory = in_memory

    def _stream_loader(self, split: str, train: bool) -> DataLoader:
        return DataLoader(
            self._datasets[split],
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.shuffle_seed) if train else None,
        )

    def _loader_for(self, split: str, train: bool) -> InMemoryLoader | DataLoader:
        self.setup()
        if self.in_memory:
            return self._loader(split, train=train)
        return self._stream_loader(split, train=train)

    def train_dataloader(self) -> InMemoryLoader | DataLoader:  # type: ignore[override]
        return self._loader_for("train", train=True)

    def val_dataloader(self) -> InMemoryLoader | DataLoader:  # type: ignore[override]
        return self._loader_for("val", train=False)

    def test_dataloader(self) -> InMemoryLoader | DataLoader:  # type: ignore[override]
        return self._loader_for("test", train=False)

    def predict_dataloader(self) -> InMemoryLoader | DataLoader:  # type: ignore[override]
        return self._loader_for("test", train=False)

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Raw uint8 images and labels of a split; decoded on demand (not cached) when the data is streamed."""
        self.setup()
        if self.in_memory:
            return self._splits[split]
        return self._decode(self._datasets[split])

    def load_image(self, path: str) -> Tensor:
        """One image file → uint8 (C, H, W) in this datamodule's `input_shape`, converted as in training."""
        return load_image_tensor(path, self.input_shape[0], self.input_shape[1:])


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


def _pick(samples: list[tuple[str, int]], indices: Tensor) -> list[tuple[str, int]]:
    """The samples at `indices`, kept in folder order so splits list files predictably."""
    return [samples[i] for i in sorted(indices.tolist())]
