"""What every image datamodule shares: its shape, a reproducible split, and fast loaders.

A datamodule states its shape (`input_shape`, `num_classes`, `class_names`) as soon as it is constructed, so the
task can build the net before any data is read and a wrong `model=` × `data=` pair fails before training starts.
Datasets that fit in memory keep uint8 (or float) tensors and are served by :class:`InMemoryLoader`;
augmentation (training batches only: the `augment_batch` hook, by default the `data.augment` policy of
litforge.data.augment) then normalisation run per batch, on the device, in `on_after_batch_transfer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

import pytorch_lightning as pl
import torch
from pydantic import Field
from torch import Tensor

import litforge  # the table of moved names (the package's top: already imported)
from litforge.core.bounds import Count, HeldOut, NonNegativeInt, Seed, fold_refusal
from litforge.core.errors import ConfigError
from litforge.core.hparams import HparamsAtFitStart
from litforge.data import memory
from litforge.data.augment import Augment, build_augment, resolve_augment
from litforge.data.memory import InMemoryLoader
from litforge.data.placement import dataset_bytes, hold_on_device


def check_folds(num_folds: int | None, fold: int) -> None:
    """The fold keys on their own (the class counts are checked by :func:`fold_indices` once labels are read)."""
    if (problem := fold_refusal(fold, num_folds)) is not None:
        raise ConfigError(problem)


def fold_indices(labels: Tensor, num_folds: int, fold: int, seed: int) -> tuple[Tensor, Tensor]:
    """(train, val) indices of fold `fold` of a stratified, seeded K-fold split of the pool `labels`.

    scikit-learn's `StratifiedKFold(shuffle=True, random_state=seed)`, a project dependency already: every class
    is dealt out over the folds, so each fold's class counts differ by at most one sample from the pool's
    proportions, and the K validation folds are disjoint and cover the pool. K above the smallest class count
    is refused (sklearn only warns, and some folds would lack that class).
    """
    from sklearn.model_selection import StratifiedKFold  # start-up: scikit-learn ~0.5 s, paid by k-fold runs only

    check_folds(num_folds, fold)
    counts = torch.bincount(labels.cpu())
    present = counts[counts > 0]
    if len(present) and int(present.min()) < num_folds:
        smallest = int(torch.nonzero(counts == present.min()).flatten()[0])
        raise ConfigError(
            f"data.num_folds={num_folds} is larger than the smallest class count (class {smallest} "
            f"has {int(present.min())} samples in the train+val pool): pass data.num_folds="
            f"{int(present.min())} or less"
        )
    splitter = StratifiedKFold(n_splits=num_folds, shuffle=True, random_state=seed)
    train_idx, val_idx = list(splitter.split(torch.zeros(len(labels), 1).numpy(), labels.cpu().numpy()))[fold]
    return torch.from_numpy(train_idx).long(), torch.from_numpy(val_idx).long()


class SplitDataModule(HparamsAtFitStart, pl.LightningDataModule):
    """A datamodule of the splits "train", "val" and "test" (predict reads "test"), whose four loaders differ only in
    the split and in whether it is the training one: a subclass writes :meth:`loader` once."""

    def loader(self, split: str, train: bool) -> Iterable[Any]:
        """The loader of `split`; `train`: shuffled, at the training batch size."""
        raise NotImplementedError

    def train_dataloader(self) -> Iterable[Any]:
        return self.loader("train", train=True)

    def val_dataloader(self) -> Iterable[Any]:
        return self.loader("val", train=False)

    def test_dataloader(self) -> Iterable[Any]:
        return self.loader("test", train=False)

    def predict_dataloader(self) -> Iterable[Any]:
        return self.loader("test", train=False)


class InMemorySplits(SplitDataModule):
    """Splits held in memory as `(inputs, targets)` tensors in `_splits`, served by :class:`InMemoryLoader` (batches
    are slices, no per-sample Python) over the data-parallel replicas: the image and the table datamodules."""

    batch_size: int
    eval_batch_size: int
    shuffle_seed: int
    _splits: dict[str, tuple[Tensor, Tensor]]

    def split_tensors(self, split: str) -> tuple[Tensor, Tensor]:
        """The tensors the loader of `split` serves (the image datamodules move them to the device first)."""
        return self._splits[split]

    # ---- augmentation: the public hook -----------------------------------------------------------------------------
    def augment_batch(self, inputs: Tensor) -> Tensor:
        """Training-time augmentation of one batch of raw inputs (before normalisation), on the batch's device.

        The hook for an augmentation of one's own: override it, and call `super().augment_batch(inputs)` to keep the
        configured one (`data.augment` of the image datamodules). :meth:`on_after_batch_transfer` calls it on
        training batches only; validation, test and predict inputs are never augmented. Draw random numbers from
        torch's global generator: its state travels in checkpoints, so a resumed run augments as the uninterrupted
        one would. The default returns the inputs unchanged.
        """
        return inputs

    def is_training_batch(self) -> bool:
        """Whether the batch in hand is a training one (an attached trainer, in its fit's training loop)."""
        return self.trainer is not None and bool(self.trainer.training)

    def normalize(self, inputs: Tensor) -> Tensor:
        """Raw inputs as the task trains on them (the image and table datamodules standardise them)."""
        return inputs

    def on_after_batch_transfer(
        self, batch: Tensor | Sequence[Tensor], dataloader_idx: int
    ) -> Tensor | Sequence[Tensor]:
        """`(inputs, targets)` with the inputs augmented on training batches (:meth:`augment_batch`, on the raw
        inputs the policies are defined on), then normalised; inputs alone (the task's example input, which
        Lightning's model summary runs) are normalised."""
        if isinstance(batch, Tensor):
            return self.normalize(batch)
        inputs = self.augment_batch(batch[0]) if self.is_training_batch() else batch[0]
        return (self.normalize(inputs), *batch[1:])

    def loader(self, split: str, train: bool) -> InMemoryLoader:
        trainer = self.trainer
        # the data-parallel replicas, not all processes: tensor-parallel ranks of one replica must see the same batch
        replicas = trainer.distributed_sampler_kwargs if trainer is not None else None
        return InMemoryLoader(
            self.split_tensors(split),
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=False,
            seed=self.shuffle_seed,
            rank=replicas["rank"] if replicas else 0,
            world_size=replicas["num_replicas"] if replicas else 1,
        )


class ImageDataModule(InMemorySplits):
    """Base for image classification data held in memory as `(images, labels)` tensors.

    Subclasses set the shape attributes in `__init__` and implement :meth:`load_arrays`, returning uint8 or float
    images of shape (N, C, H, W) with pixel values in [0, 1] (float) or [0, 255] (uint8), and int64 labels, for
    "train" and "test" (the validation set is carved out of "train" with the seed).
    """

    kind = "image"  # tasks check this to refuse an incompatible data family early
    decoder = "torchvision"  # how image files are decoded (image_folder's data.decoder); predict decodes alike

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: Count = 64,
        eval_batch_size: Count | None = None,
        val_fraction: HeldOut = 0.1,
        split_seed: Seed = 0,
        shuffle_seed: Seed = 0,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        augment: Augment | bool = "none",  # true/false: the older spelling of flip_crop/none
        on_device: Literal["auto"] | bool = "auto",
        num_folds: Annotated[int, Field(ge=2, examples=[5])] | None = None,
        fold: NonNegativeInt = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data_dir = data_dir
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or max(batch_size, 256)
        self.val_fraction = val_fraction
        self.split_seed = split_seed
        self.shuffle_seed = shuffle_seed
        # training-time augmentation (litforge.data.augment): none | flip_crop | randaugment | trivialaugment |
        # autoaugment; built once, applied to training batches only, before normalisation
        self.augment = resolve_augment(augment)
        self._augment_fn = build_augment(self.augment)
        # K-fold cross-validation: the train+val pool is split into `num_folds` stratified folds, fold `fold` is
        # validation (null = the usual `val_fraction` split); the test split is never part of the pool
        check_folds(num_folds, fold)
        self.num_folds = num_folds
        self.fold = fold
        # hold the split tensors on the accelerator: no host→device copy per batch (a no-op on CPU); auto: on a
        # CUDA device when they fit comfortably (litforge.data.placement)
        self.on_device = on_device
        self._hold: bool | None = None  # the decision, taken once for all splits when the first loader is built
        self.input_shape: tuple[int, int, int] = (1, 1, 1)
        self.num_classes: int = 0
        self.class_names: list[str] = []
        self._mean = mean
        self._std = std
        self._stats_cache: tuple[tuple[object, ...], Tensor, Tensor] | None = None  # (its key, mean, std)
        self._splits: dict[str, tuple[Tensor, Tensor]] = {}

    # ---- subclasses -----------------------------------------------------------------------------------------------
    def load_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Return `(images, labels)` for "train" or "test"."""
        raise NotImplementedError

    # ---- Lightning hooks ------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self._splits:
            return
        images, labels = self.load_arrays("train")
        train_idx, val_idx = self.train_val_indices(labels)
        splits = {
            "train": (images[train_idx], labels[train_idx]),
            "val": (images[val_idx], labels[val_idx]),
            "test": self.load_arrays("test"),
        }
        self._check_shapes(splits)
        if self._mean is None or self._std is None:
            self._mean, self._std = channel_stats(splits["train"][0])
        self._splits = splits  # only once everything loaded: a failed setup can simply be retried

    def train_val_indices(self, labels: Tensor) -> tuple[Tensor, Tensor]:
        """(train, val) indices into the train+val pool: fold `fold` of `num_folds`, or the seeded `val_fraction`."""
        if self.num_folds is not None:
            return fold_indices(labels, self.num_folds, self.fold, self.split_seed)
        train_idx, val_idx, _ = memory.split_indices(len(labels), self.val_fraction, 0.0, self.split_seed)
        return train_idx, val_idx

    def _check_shapes(self, splits: dict[str, tuple[Tensor, Tensor]]) -> None:
        for split, (images, labels) in splits.items():
            if tuple(images.shape[1:]) != self.input_shape:
                raise ValueError(
                    f"{type(self).__name__} {split} images have shape {tuple(images.shape[1:])}, "
                    f"expected {self.input_shape}"
                )
            if len(images) != len(labels):
                raise ValueError(f"{split}: {len(images)} images but {len(labels)} labels")

    def split_tensors(self, split: str) -> tuple[Tensor, Tensor]:
        """The split's tensors, moved once to the trainer's device when `on_device` says so (whole dataset on the GPU).

        Batches then are slices of device tensors and Lightning's per-batch transfer is a no-op. Images stay uint8
        where they were, so a dataset takes a quarter of its float size on the device. `auto` decides once, for all
        splits together (litforge.data.placement.hold_on_device).
        """
        tensors = self._splits[split]
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        if device.type == "cpu":
            return tensors
        if self._hold is None:
            self._hold = hold_on_device(self.on_device, dataset_bytes(self._splits.values()), device)
        if not self._hold:
            return tensors
        if tensors[0].device != device:
            tensors = (tensors[0].to(device), tensors[1].to(device))
            self._splits[split] = tensors
        return tensors

    def augment_batch(self, images: Tensor) -> Tensor:
        """The configured `data.augment` policy (litforge.data.augment) on a training batch of raw images (uint8
        [0, 255] or float [0, 1], N x C x H x W); override for one's own (see InMemorySplits.augment_batch)."""
        return images if self._augment_fn is None else self._augment_fn(images)

    # normalisation statistics travel in the checkpoint (Lightning saves a datamodule's state_dict), so predict and
    # export can preprocess new images exactly like training without reading the training data again
    def state_dict(self) -> dict[str, Any]:
        return {"mean": self._mean, "std": self._std} if self._mean is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("mean") is not None:
            self._mean, self._std = list(state_dict["mean"]), list(state_dict["std"])

    # ---- shared helpers -------------------------------------------------------------------------------------------
    def normalize(self, images: Tensor) -> Tensor:
        """uint8 [0, 255] or float [0, 1] → standardised float, per channel."""
        if images.dtype == torch.uint8:
            images = images.float().div_(255.0)
        mean, std = self._stats_on(images)
        return (images - mean) / std

    def _stats_on(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """mean/std as (1, C, 1, 1) tensors on the batch's device, built once: from the Python lists on every batch
        they were a host->device copy per step (a host sync on a GPU)."""
        mean, std = self._mean, self._std
        if mean is None or std is None:
            raise RuntimeError(f"{type(self).__name__}.normalize without statistics: call ensure_stats() first")
        key = (images.device, images.dtype, tuple(mean), tuple(std))
        cached = self._stats_cache
        if cached is None or cached[0] != key:
            stats = [
                torch.as_tensor(v, dtype=images.dtype, device=images.device).view(1, -1, 1, 1) for v in (mean, std)
            ]
            cached = self._stats_cache = (key, stats[0], stats[1])
        return cached[1], cached[2]

    def ensure_stats(self) -> None:
        """Normalisation needs mean/std: from the config, the checkpoint, or else the training split."""
        if self._mean is None or self._std is None:
            self.setup()

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Raw (unnormalised) images and labels of a split, e.g. for prediction or notebooks."""
        self.setup()
        return self._splits[split]

    def describe(self) -> dict[str, Any]:
        """The shape facts a task needs to build its net."""
        return {
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "class_names": list(self.class_names),
        }


def channel_stats(images: Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of images in [0, 1] (uint8 is rescaled), computed on the training split only."""
    x = images.float()
    if images.dtype == torch.uint8:
        x = x / 255.0
    mean = x.mean(dim=(0, 2, 3))
    std = x.std(dim=(0, 2, 3)).clamp_min(1e-6)
    return [round(v, 6) for v in mean.tolist()], [round(v, 6) for v in std.tolist()]


def __getattr__(name: str) -> object:
    """`split_indices` lived here (the guide taught `from litforge.data.base import split_indices`): it still imports,
    with a DeprecationWarning naming its public home (litforge.MOVED_FROM)."""
    return litforge.moved_attribute(__name__, name)
