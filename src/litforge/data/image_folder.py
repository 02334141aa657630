"""The user's own images, one sub-folder per class, as in torchvision's `ImageFolder`: a dataset and a datamodule.

This module serves the images; the folder scan (layouts, classes, splits) is :mod:`litforge.data.folder_layout`
and reading one file is :mod:`litforge.data.images`, which prediction shares so an image file becomes exactly
what the net saw in training.

The shape is known right after construction, from the folder names and ONE image header, so the task can build its
net before any pixel is decoded. `setup` then decides how to serve the data: a dataset that fits in
`max_in_memory_mb` (auto: a quarter of the available host memory, the rule benchmarks/loader_throughput.py supports)
as uint8 is decoded once into tensors and served by the base class's fast
:class:`~litforge.data.memory.InMemoryLoader`; a bigger one is streamed from disk by a `torch.utils.data.DataLoader`
with `num_workers` processes. Both paths produce the same uint8 (C, H, W) images through
:func:`~litforge.data.images.image_to_tensor`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from litforge.core.bounds import Count, HeldOut, NonNegative, NonNegativeInt, Seed
from litforge.core.errors import ConfigError, DataError
from litforge.data.augment import Augment
from litforge.data.base import ImageDataModule, channel_stats
from litforge.data.folder_layout import SPLIT_FOLDERS, FolderLayout, Samples
from litforge.data.images import (
    check_channels,
    check_decoder,
    decode_jpeg_file,
    image_to_tensor,
    mode_channels,
    open_image,
    parse_image_size,
    read_header,
    resize_tensor,
)
from litforge.data.memory import InMemoryLoader
from litforge.data.pinned import pin_memory_for
from litforge.data.placement import check_in_memory_limit, hold_in_memory
from litforge.data.stateful import stateful_train_loader

STATS_SAMPLE = 2048  # images used to estimate mean/std when streaming (decoding all of a big set would be slow)


def _size_text(size_hw: tuple[int, int]) -> str:
    return f"{size_hw[0]}x{size_hw[1]}"


def mixed_sizes_message(ref_path: str, ref_hw: tuple[int, int], path: str, hw: tuple[int, int]) -> str:
    suggestion = str(ref_hw[0]) if ref_hw[0] == ref_hw[1] else f"[{ref_hw[0]},{ref_hw[1]}]"
    return (
        f"images have different sizes ({ref_path}: {_size_text(ref_hw)}, {path}: {_size_text(hw)}, height x "
        f"width); set data.image_size={suggestion} to resize them all to {_size_text(ref_hw)}"
    )


def mixed_modes_message(ref_path: str, ref_mode: str, path: str, mode: str) -> str:
    def describe(m: str) -> str:
        return f"{m} = {'grey' if mode_channels(m) == 1 else 'colour'}"

    return (
        f"images have different colour modes ({ref_path}: {describe(ref_mode)}, {path}: {describe(mode)}); set "
        f"data.channels=3 to convert them all to RGB (or data.channels=1 for grey)"
    )


# data.image_size: a side, or [height, width], each >= 1 (null: the native size)
ImageSize = Annotated[
    Count | Annotated[list[Count], Field(min_length=2, max_length=2)],
    Field(description="an integer >= 1 or [height,width]", examples=[64]),
]


class ImageFileDataset(Dataset):
    """(path, label) samples → (uint8 (C, H, W) tensor, label), with the consistency checks of the datamodule.

    `ref` is the reference image (path, (h, w), mode) that fixed the shape: when `image_size` is None every image
    must have its size, and when `check_mode` every image must have its number of channels. `decoder` is
    "torchvision" (JPEG files through torchvision's decoder, everything else through PIL) or "pil". Top-level and
    plain, so DataLoader worker processes can pickle it.
    """

    def __init__(
        self,
        samples: Samples,
        channels: int,
        image_size: tuple[int, int] | None,
        ref: tuple[str, tuple[int, int], str],
        check_mode: bool,
        decoder: str = "torchvision",
    ) -> None:
        self.samples = samples
        self.decoder = decoder
        self.channels = channels
        self.image_size = image_size
        self.ref = ref
        self.check_mode = check_mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        path, label = self.samples[index]
        ref_path, ref_hw, ref_mode = self.ref
        if self.decoder == "torchvision":
            fast = decode_jpeg_file(path)
            # a JPEG in the wanted channels, of the reference size unless resized; anything else goes through PIL,
            # which converts it or raises the mixed size/mode error
            if (
                fast is not None
                and fast.shape[0] == self.channels
                and (self.image_size is not None or tuple(fast.shape[1:]) == ref_hw)
            ):
                return resize_tensor(fast, self.image_size), label
        img = open_image(path)
        if self.check_mode and mode_channels(img.mode) != mode_channels(ref_mode):
            raise DataError(mixed_modes_message(ref_path, ref_mode, path, img.mode))
        if self.image_size is None and (img.height, img.width) != ref_hw:
            raise DataError(mixed_sizes_message(ref_path, ref_hw, path, (img.height, img.width)))
        return image_to_tensor(img, self.channels, self.image_size), label


class ImageFolderDataModule(ImageDataModule):
    """Classification data from `root/<class>/<image>` (or `root/train|val|test/<class>/<image>`).

    `image_size` None keeps the native size (then all images must share it); `channels` None takes grey (1) or
    RGB (3) from the first image (then all images must agree). Data up to `max_in_memory_mb` (as uint8; `auto` = a
    quarter of the available host memory) is held in memory; bigger data is streamed from disk by `num_workers`
    DataLoader workers. `mean`/`std` default to the
    training split's statistics (estimated on a seeded sample of 2048 images when streaming). `decoder`
    "torchvision" decodes JPEG files with torchvision (the same pixels as PIL, faster), "pil" decodes all with PIL.
    """

    def __init__(
        self,
        root: str,
        image_size: ImageSize | None = None,
        channels: Literal[1, 3] | None = None,
        val_fraction: HeldOut = 0.1,
        test_fraction: HeldOut = 0.2,
        split_seed: Seed = 0,
        shuffle_seed: Seed = 0,
        batch_size: Count = 64,
        eval_batch_size: Count | None = None,
        num_workers: NonNegativeInt = 0,
        augment: Augment | bool = "none",
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        max_in_memory_mb: NonNegative | Literal["auto"] = "auto",
        on_device: Literal["auto"] | bool = "auto",
        num_folds: Annotated[int, Field(ge=2, examples=[5])] | None = None,
        fold: NonNegativeInt = 0,
        decoder: Literal["torchvision", "pil"] = "torchvision",
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
            num_folds=num_folds,
            fold=fold,
        )
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 <= value < 1:
                raise ConfigError(f"data.{name}={value} must be at least 0 and below 1, e.g. 0.1")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"data.num_workers={num_workers!r} must be 0 (load in the main process) or more")
        check_channels(channels)
        check_decoder(decoder)
        check_in_memory_limit(max_in_memory_mb)
        self.decoder = decoder
        self.root = os.path.abspath(os.path.expanduser(str(root)))
        self.image_size = parse_image_size(image_size)
        self.test_fraction = test_fraction
        self.num_workers = num_workers
        self.max_in_memory_mb = max_in_memory_mb

        self.layout = FolderLayout.scan(self.root)
        self.class_names = self.layout.class_names
        self.num_classes = len(self.class_names)
        ref_hw, ref_mode = read_header(self.layout.first_image)
        self._ref = (self.layout.first_image, ref_hw, ref_mode)
        self._check_mode = channels is None
        self.channels = channels if channels is not None else mode_channels(ref_mode)
        height, width = self.image_size or ref_hw
        self.input_shape = (self.channels, height, width)
        for name, stats in (("mean", mean), ("std", std)):
            if stats is not None and len(stats) != self.channels:
                raise ConfigError(
                    f"data.{name} has {len(stats)} values but the images have {self.channels} "
                    f"channel(s); give {self.channels} values or null (computed from the data)"
                )

        self.in_memory: bool | None = None  # decided in setup
        self._samples: dict[str, Samples] = {}
        self._datasets: dict[str, ImageFileDataset] = {}

    # ---- splits ---------------------------------------------------------------------------------------------------
    def _scan(self) -> dict[str, Samples]:
        """Every split's (path, label) list, listed once: all loaders and `split_arrays` then see the same files."""
        if not self._samples:
            self._samples = self.layout.samples(
                self.val_fraction,
                self.test_fraction,
                self.split_seed,
                folds=(self.num_folds, self.fold) if self.num_folds is not None else None,
            )
        return self._samples

    def split_samples(self, split: str) -> Samples:
        """The (file path, label) pairs of "train", "val" or "test", in `split_arrays` order (predict names its rows
        by them)."""
        return list(self._scan()[split])

    def split_dataset(self, split: str) -> ImageFileDataset:
        """A split as a map-style dataset that decodes one file per item: `python prepare.py` writes
        shards from it without holding the split in memory."""
        return self._dataset(split)

    def _dataset(self, split: str) -> ImageFileDataset:
        return ImageFileDataset(
            self._scan()[split], self.channels, self.image_size, self._ref, self._check_mode, self.decoder
        )

    def _decode(self, dataset: Dataset) -> tuple[Tensor, Tensor]:
        """Decode a whole dataset into (uint8 images, int64 labels), with `num_workers` processes."""
        if len(dataset) == 0:  # type: ignore[arg-type]
            return torch.empty((0, *self.input_shape), dtype=torch.uint8), torch.empty(0, dtype=torch.int64)
        loader = DataLoader(dataset, batch_size=256, shuffle=False, num_workers=self.num_workers)
        images, labels = zip(*loader, strict=True)
        return torch.cat(images), torch.cat(labels).to(torch.int64)

    def load_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Decoded images and labels of "train", "val" or "test" (the final splits, val already held out)."""
        return self._decode(self._dataset(split))

    # ---- Lightning hooks ------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Scan the files, then hold them in memory if they fit in `max_in_memory_mb` (auto: a quarter of the
        available host memory, litforge.data.placement.hold_in_memory), else stream them."""
        if self.in_memory is not None:
            return
        samples = self._scan()
        n_bytes = sum(len(s) for s in samples.values()) * int(np.prod(self.input_shape))
        ranks_per_node = max(1, self.trainer.num_devices) if self.trainer is not None else 1
        in_memory = hold_in_memory(self.max_in_memory_mb, n_bytes, ranks_per_node)
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
        if train:  # resumable mid-epoch, workers included (litforge.data.stateful)
            return stateful_train_loader(
                self._datasets[split],
                batch_size=self.batch_size,
                seed=self.shuffle_seed,
                num_workers=self.num_workers,
                drop_last=False,
                pin_memory=pin_memory_for(self.trainer),
                trainer=self.trainer,
            )
        # generator: a DataLoader draws its workers' base seed when its iterator is made, from the global RNG unless
        # given one. With persistent workers that happens once per run: in the sanity check of a fresh run, but at
        # the first validation of a resumed one (Lightning skips the sanity check on resume), after the checkpoint's
        # RNG state was restored, which shifted every later dropout mask (a kill -9 resumed to another val/loss).
        return DataLoader(
            self._datasets[split],
            batch_size=self.eval_batch_size,
            shuffle=False,
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.shuffle_seed),
            pin_memory=pin_memory_for(self.trainer),  # async host-to-GPU copies (litforge.data.pinned)
        )

    def loader(self, split: str, train: bool) -> InMemoryLoader | DataLoader:  # type: ignore[override]
        self.setup()
        if self.in_memory:
            return super().loader(split, train=train)
        return self._stream_loader(split, train=train)

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Raw uint8 images and labels of a split; decoded on demand (not cached) when the data is streamed."""
        self.setup()
        if self.in_memory:
            return self._splits[split]
        return self._decode(self._datasets[split])
