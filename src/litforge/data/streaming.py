"""Image data bigger than memory or local disk: LitData shards written from any image datamodule, streamed back.

`python prepare.py data=<dm> output=<folder or s3://bucket/path>` writes each split with LitData's
`optimize` into `<output>/{train,val,test}/` (chunk files + LitData's `index.json`) and the shape facts beside them
in `<output>/litforge_facts.json`; `data=streaming data.input_dir=<the same>` trains from them through LitData's
`StreamingDataset` / `StreamingDataLoader`. LitData does the hard parts itself, which is why it is used and not
hand-written: reading chunks from a local folder or an object store with a bounded local cache, shuffling chunk
order and items per epoch from a seed, splitting the samples between DDP ranks and workers (no sample twice per
epoch), and a loader `state_dict` that Lightning saves in every checkpoint and hands back on resume (exact
mid-epoch resume, workers included).

What litforge adds: the facts file (LitData's `index.json` knows the item format, not the classes or the
normalisation a net needs), so `describe()` works from the shards alone; and batches become `(images, labels)`
after the device transfer, normalised exactly as the source datamodule normalised them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import fsspec
import torch
from torch import Tensor
from torch.utils.data import Dataset, TensorDataset

from litforge.core.bounds import Count, NonNegativeInt, Seed
from litforge.core.contracts import DataModule, DatasetSplits
from litforge.core.errors import ConfigError, DataError
from litforge.data.augment import Augment
from litforge.data.base import ImageDataModule

FACTS_FILE = "litforge_facts.json"  # the shape facts beside the split folders
FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")
PREPARE_HINT = "python prepare.py data=<digits|mnist|cifar10|image_folder> output=<that folder>"


def is_remote(path: str) -> bool:
    """An object-store URL (s3://, gs://, gcs://, azure://, hf://, ...) rather than a local folder."""
    return "://" in str(path) and not str(path).startswith("local:")


def split_dir(root: str, split: str) -> str:
    return f"{str(root).rstrip('/')}/{split}" if is_remote(root) else os.path.join(os.path.abspath(root), split)


# ---- writing ----------------------------------------------------------------------------------------------------
def source_facts(datamodule: Any) -> dict[str, Any]:
    """What a net and the normalisation need, from a built image datamodule (its `describe()` plus mean/std)."""
    kind = datamodule.kind if isinstance(datamodule, DataModule) else None
    if kind != "image":
        raise ConfigError(
            f"prepare writes image datamodules only; data={type(datamodule).__name__} has kind "
            f"{kind!r}: choose data=digits, mnist, cifar10 or image_folder"
        )
    datamodule.ensure_stats()
    stats = datamodule.state_dict()  # the normalisation a checkpoint of a `data=<dm>` run would carry
    return {
        "format": FORMAT_VERSION,
        "kind": "image",
        "source": f"{type(datamodule).__module__}.{type(datamodule).__qualname__}",
        **datamodule.describe(),
        "mean": list(stats["mean"]),
        "std": list(stats["std"]),
    }


def split_dataset(datamodule: Any, split: str) -> Dataset:
    """A map-style dataset of `(image, label)` for one split: the datamodule's own file-backed dataset when it
    streams from disk (nothing is decoded up front), else its in-memory tensors."""
    if isinstance(datamodule, DatasetSplits):
        return datamodule.split_dataset(split)
    return TensorDataset(*datamodule.split_arrays(split))


class ShardSample:
    """LitData's `fn` for `optimize`: input `i` → `{"index": i, "image": tensor, "label": int}` of one split.

    A class (not a closure) so LitData's worker processes can pickle it; the index travels with each sample, so
    every rank's share of an epoch can be checked (disjoint, covering the split).
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __call__(self, index: int) -> dict[str, Any]:
        image, label = self.dataset[index]
        return {"index": int(index), "image": torch.as_tensor(image), "label": int(label)}


def default_start_method() -> str | None:
    """fork on Linux (torch's DataLoader default there); elsewhere LitData's own default (spawn)."""
    return "fork" if sys.platform.startswith("linux") else None


def output_is_empty(output: str) -> bool:
    """True when `output` does not exist or holds nothing (local folders; an object store is asked by LitData)."""
    return not os.path.exists(output) or (os.path.isdir(output) and not os.listdir(output))


def write_shards(
    datamodule: Any,
    output: str,
    *,
    overwrite: bool = False,
    chunk_bytes: str | int = "64MB",
    num_workers: int = 1,
    storage_options: Mapping[str, Any] | None = None,
    start_method: str | None = None,
) -> dict[str, Any]:
    """Write the train/val/test splits of `datamodule` as LitData shards under `output`, and the facts file.

    Returns the facts (with each split's sample count). LitData's `optimize` shows the progress bar and uploads to
    an object store itself; the facts file goes through fsspec, Lightning's file-system layer (an s3:// output
    needs fsspec's `s3fs`, which reads the same AWS credentials as LitData). `start_method` None forks the writer
    processes on Linux, as torch's DataLoader starts its workers there: they share the loaded split instead of
    unpickling a copy, and start in 0.2 s instead of LitData's default spawn's ~5 s per split here.
    """
    from litdata import optimize  # extra [streaming]

    output = str(output)
    if not is_remote(output):
        output = os.path.abspath(os.path.expanduser(output))
        if not output_is_empty(output):
            if not overwrite:
                raise ConfigError(
                    f"output={output} is not empty: pass overwrite=true to replace it, or choose another folder"
                )
            shutil.rmtree(output) if os.path.isdir(output) else os.remove(output)
    facts = source_facts(datamodule)
    datamodule.setup()
    counts: dict[str, int] = {}
    for split in SPLITS:
        dataset = split_dataset(datamodule, split)
        counts[split] = len(dataset)  # type: ignore[arg-type]
        if counts[split] == 0:
            continue  # LitData refuses empty inputs; the datamodule then serves an empty loader
        print(f"prepare: writing {split} ({counts[split]} samples) to {split_dir(output, split)}", flush=True)
        optimize(
            fn=ShardSample(dataset),
            inputs=list(range(counts[split])),
            output_dir=split_dir(output, split),
            chunk_bytes=chunk_bytes,
            num_workers=num_workers,
            reorder_files=False,
            mode="overwrite" if overwrite and is_remote(output) else None,
            storage_options=dict(storage_options or {}),
            start_method=start_method or default_start_method(),
        )
    facts["splits"] = counts
    _write_text(
        f"{output.rstrip('/')}/{FACTS_FILE}" if is_remote(output) else os.path.join(output, FACTS_FILE),
        json.dumps(facts, indent=2) + "\n",
        storage_options,
    )
    return facts


def _write_text(path: str, text: str, storage_options: Mapping[str, Any] | None) -> None:
    with fsspec.open(path, "w", **dict(storage_options or {})) as f:
        f.write(text)


def read_facts(input_dir: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The facts `prepare` wrote, or one line naming `data.input_dir` and the fix."""
    if input_dir in (None, "", "???"):
        raise ConfigError(
            f"data.input_dir is not set: pass data.input_dir=<a folder written by prepare>, made with {PREPARE_HINT}"
        )
    path = (
        f"{str(input_dir).rstrip('/')}/{FACTS_FILE}"
        if is_remote(input_dir)
        else os.path.join(os.path.abspath(os.path.expanduser(str(input_dir))), FACTS_FILE)
    )
    try:
        with fsspec.open(path, "r", **dict(storage_options or {})) as f:
            facts = json.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"data.input_dir={input_dir} holds no {FACTS_FILE}, so it is not a prepared streaming "
            f"dataset: run {PREPARE_HINT} first, then pass that folder"
        ) from None
    except (OSError, ValueError, ImportError) as err:
        raise DataError(
            f"data.input_dir={input_dir}: could not read {FACTS_FILE} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); check the path and credentials, or "
            f"write it again with {PREPARE_HINT} overwrite=true"
        ) from None
    if not isinstance(facts, dict) or facts.get("format") != FORMAT_VERSION or facts.get("kind") != "image":
        raise DataError(
            f"data.input_dir={input_dir}: {FACTS_FILE} is not a litforge format-{FORMAT_VERSION} image "
            f"dataset; write it again with {PREPARE_HINT} overwrite=true"
        )
    return facts


# ---- reading ----------------------------------------------------------------------------------------------------
@functools.cache
def resumable_loader_class() -> type:
    """LitData's `StreamingDataLoader`, fixed for resumed runs whose epochs end early (`trainer.limit_train_batches`).

    After `load_state_dict`, LitData sets the loader's `restore` flag and clears it only when an epoch runs to its
    end; an epoch that Lightning leaves early (limit_train_batches, max_steps mid-epoch) leaves it set, so every
    later epoch of the resumed run replays the restored position instead of starting a new epoch, and the run drifts
    from an uninterrupted one. This subclass keeps the flag for the first iteration after a restore only (the
    resumed epoch) and clears it before any later one, the fix proposed upstream for the same flag in
    Lightning-AI/litData#770 (ParallelStreamingDataset; closed) and #649. `restore` is a public attribute of the
    loader; tests/test_compat.py checks the LitData behaviour this relies on and fails when it changes.
    """
    from litdata import StreamingDataLoader  # extra [streaming]

    class ResumableStreamingDataLoader(StreamingDataLoader):
        _resumed_epoch_pending = False
        restore: bool  # litdata's StreamingDataLoader sets it in __init__ and load_state_dict

        def load_state_dict(self, obj: dict[str, Any]) -> None:
            super().load_state_dict(obj)
            self._resumed_epoch_pending = True  # the next iteration continues the saved epoch

        def __iter__(self) -> Any:
            if self.restore and not self._resumed_epoch_pending:
                self.restore = False  # the resumed epoch was left early: this one is a new epoch
            self._resumed_epoch_pending = False
            return super().__iter__()

    return ResumableStreamingDataLoader


class StreamingImageDataModule(ImageDataModule):
    """Image classification from LitData shards written by `python prepare.py`.

    The shape (`input_shape`, `num_classes`, `class_names`) and the normalisation come from the facts file, so the
    net is built before a chunk is read. Training batches are shuffled by LitData from `shuffle_seed` (a new order
    each epoch); under DDP each rank streams its own share. Evaluation loaders do not shuffle.
    """

    def __init__(
        self,
        input_dir: str,
        batch_size: Count = 64,
        eval_batch_size: Count | None = None,
        num_workers: NonNegativeInt = 0,
        shuffle_seed: Seed = 0,
        cache_dir: str | None = None,
        max_cache_size: str | int = "100GB",
        storage_options: Mapping[str, Any] | None = None,
        augment: Augment | bool = "none",
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        on_device: Literal["auto"] | bool = "auto",
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"data.num_workers={num_workers!r} must be 0 (load in the main process) or more")
        self.input_dir = (
            str(input_dir) if is_remote(str(input_dir)) else os.path.abspath(os.path.expanduser(str(input_dir)))
        )
        self.storage_options = dict(storage_options or {})
        self.facts = read_facts(self.input_dir, self.storage_options)
        # eval_batch_size defaults to batch_size, not the in-memory max(batch_size, 256): LitData hands each rank its
        # samples in whole batches (the remainder to the last rank), so under DDP a big evaluation batch can leave a
        # rank with an empty validation loader, which Lightning refuses
        super().__init__(
            data_dir=self.input_dir,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size or batch_size,
            val_fraction=0.0,
            shuffle_seed=shuffle_seed,
            mean=list(mean) if mean is not None else list(self.facts["mean"]),
            std=list(std) if std is not None else list(self.facts["std"]),
            augment=augment,
            on_device=on_device,
        )
        self.num_workers = num_workers
        self.cache_dir = cache_dir
        self.max_cache_size = max_cache_size
        self.input_shape = tuple(self.facts["input_shape"])
        self.num_classes = int(self.facts["num_classes"])
        self.class_names = list(self.facts["class_names"])

    def setup(self, stage: str | None = None) -> None:
        """Nothing to load: the facts are read at construction, the samples are streamed by the loaders."""

    def split_size(self, split: str) -> int:
        return int(self.facts.get("splits", {}).get(split, 0))

    def dataset(self, split: str, train: bool = False) -> Any:
        """LitData's `StreamingDataset` over one split (train: shuffled from `shuffle_seed`, a new order per epoch)."""
        from litdata import StreamingDataset  # extra [streaming]

        if self.split_size(split) == 0:
            return TensorDataset(torch.empty((0, *self.input_shape)), torch.empty(0, dtype=torch.int64))
        # drop_last None: LitData's default, which under DDP drops the last few training samples so every rank
        # gets the same number of batches (uneven ranks would hang in the gradient all-reduce); evaluation keeps all
        return StreamingDataset(
            split_dir(self.input_dir, split),
            cache_dir=self.cache_dir,
            shuffle=train,
            seed=self.shuffle_seed,
            drop_last=None if train else False,
            max_cache_size=self.max_cache_size,
            storage_options=self.storage_options,
        )

    def loader(self, split: str, train: bool) -> Any:
        dataset = self.dataset(split, train=train)
        batch_size = self.batch_size if train else self.eval_batch_size
        if isinstance(dataset, TensorDataset):
            return torch.utils.data.DataLoader(dataset, batch_size=batch_size)
        # StreamingDataLoader has state_dict/load_state_dict: Lightning saves its position in every checkpoint.
        # generator: torch's DataLoader draws its workers' base seed from the global RNG on every iter() unless given
        # one, which shifted the dropout masks of a resumed run (its extra sanity-check iter drew once more)
        return resumable_loader_class()(
            dataset,
            batch_size=batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.shuffle_seed),
        )

    def on_after_batch_transfer(
        self, batch: Tensor | Sequence[Tensor] | Mapping[str, Tensor], dataloader_idx: int
    ) -> Tensor | Sequence[Tensor]:
        if isinstance(batch, Mapping):  # LitData yields the stored dicts; the tasks take (images, labels)
            batch = (batch["image"], batch["label"])
        return super().on_after_batch_transfer(batch, dataloader_idx)

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """Raw images and labels of a split in stored order (read through the stream: for small splits only)."""
        images, labels = [], []
        for batch in self.loader(split, train=False):
            image, label = (batch["image"], batch["label"]) if isinstance(batch, Mapping) else batch
            images.append(image)
            labels.append(label)
        if not images:
            return torch.empty((0, *self.input_shape)), torch.empty(0, dtype=torch.int64)
        return torch.cat(images), torch.cat(labels).to(torch.int64)
