"""Datasets that fit in memory: a batch loader, and the seeded split of their rows.

`torch.utils.data.DataLoader` collates every batch sample by sample in Python; for small datasets (digits, MNIST,
CIFAR-10 as uint8) that costs more than the training step itself. This loader slices whole batches out of tensors
instead, which is what a hand-written training loop does.

It also does the two things Lightning cannot do for a non-`DataLoader` iterable:
- sharding across data-parallel ranks (Lightning only injects a `DistributedSampler` into real DataLoaders);
- exact mid-epoch resume: Lightning saves `state_dict()` of any stateful iterable in the checkpoint and hands it
  back through `load_state_dict()`, so a resumed run sees exactly the batches the interrupted one had not seen yet.

The order of epoch `e` depends only on `(seed, e)`, never on global RNG state, so an interrupted and resumed run
shuffles exactly like an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor


class InMemoryLoader:
    """Yields tuples of batch tensors sliced from `tensors` (all sharing their first dimension).

    With `world_size > 1` each global batch of `batch_size * world_size` samples is split into contiguous per-rank
    slices, so N ranks at batch size B see the same global batches as one process at batch size N*B (that is what
    makes DDP reproduce a single-process run). Samples that do not fill a whole global batch are dropped when
    `drop_last`, otherwise the last global batch is split as evenly as possible.
    """

    def __init__(
        self,
        tensors: tuple[Tensor, ...],
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        lengths = {len(t) for t in tensors}
        if len(lengths) != 1:
            raise ValueError(f"all tensors need the same length, got {sorted(lengths)}")
        self.tensors = tensors
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._yielded = 0  # batches of the current epoch handed out so far
        self._finished = False
        self._resume: tuple[int, int] | None = None  # (epoch, batches done) from a checkpoint

    @property
    def num_samples(self) -> int:
        return len(self.tensors[0])

    def __len__(self) -> int:
        global_batch = self.batch_size * self.world_size
        if self.drop_last:
            return self.num_samples // global_batch
        return -(-self.num_samples // global_batch)

    def _order(self) -> Tensor:
        if not self.shuffle:
            return torch.arange(self.num_samples)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.num_samples, generator=generator)

    def _rank_slice(self, start: int, stop: int) -> tuple[int, int]:
        """This rank's contiguous part of the global batch [start, stop)."""
        size = stop - start
        base, extra = divmod(size, self.world_size)
        lo = start + self.rank * base + min(self.rank, extra)
        hi = lo + base + (1 if self.rank < extra else 0)
        return lo, hi

    # Lightning calls `dataloader.sampler.set_epoch(epoch)` on training loaders at the start of every epoch, with
    # the epoch restored from the checkpoint on resume; that makes the loop, not this object, the source of truth.
    @property
    def sampler(self) -> "InMemoryLoader":
        return self

    batch_sampler = None  # Lightning inspects it to decide whether a loader shuffles

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        start = 0
        if self._resume is not None:
            saved_epoch, saved_done = self._resume
            self._resume = None
            if saved_epoch == self.epoch:  # resumed inside this epoch: skip what was already trained on
                start = saved_done
        order = self._order().to(self.tensors[0].device)  # index on the data's device (data.on_device=true)
        global_batch = self.batch_size * self.world_size
        self._finished = False
        for index in range(start, len(self)):
            batch_start = index * global_batch
            lo, hi = self._rank_slice(batch_start, min(batch_start + global_batch, self.num_samples))
            self._yielded = index + 1
            if self.shuffle:
                idx = order[lo:hi]
                yield tuple(t[idx] for t in self.tensors)
            else:  # contiguous slices: no gather for validation and test
                yield tuple(t[lo:hi] for t in self.tensors)
        self._finished = True

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: the batches handed out so far, all of which the training step has consumed.

        Lightning's training fetcher pre-fetches a batch only for loaders without a length (pytorch_lightning
        loops/fetchers.py: "if self.length is not None: ignore pre-fetching"); this loader has one, so every yielded
        batch has been trained on by the time a checkpoint is written (on_train_batch_end, validation, SIGTERM).
        Proven end to end by tests/test_reliability.py::test_sigterm_mid_epoch_saves_the_step_and_resumes_exactly.
        """
        done = len(self) if self._finished else self._yielded
        return {"epoch": self.epoch, "batches_done": done, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resume = (int(state["epoch"]), int(state["batches_done"]))
        self.seed = int(state.get("seed", self.seed))


def split_indices(n: int, val_fraction: float, test_fraction: float, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """A seeded random train/val/test partition of range(n); the same seed always gives the same split."""
    if not 0 <= val_fraction < 1 or not 0 <= test_fraction < 1 or val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction={val_fraction} and test_fraction={test_fraction} must leave training data")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_test = round(n * test_fraction)
    n_val = round(n * val_fraction)
    return order[n_test + n_val :], order[n_test : n_test + n_val], order[:n_test]
