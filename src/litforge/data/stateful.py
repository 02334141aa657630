"""Training loaders that resume mid-epoch exactly, with worker processes too: torchdata's `StatefulDataLoader`.

A plain `torch.utils.data.DataLoader` has no `state_dict`, so a run resumed mid-epoch re-reads that epoch in a new
order (Lightning warns "your dataloader is not resumable"). `StatefulDataLoader` is a drop-in DataLoader that saves
its sampler (the shuffle generator's state) and the batches already handed out, also with `num_workers > 0`;
Lightning stores that state in every checkpoint and hands it back on resume (it saves and restores any training
loader with `state_dict`/`load_state_dict`). Evaluation loaders stay plain DataLoaders: they always start at 0.

Under data parallelism (ddp, fsdp, tp, ...: `trainer.distributed_sampler_kwargs` is set) the loader gets torchdata's
`StatefulDistributedSampler` straight away, with this rank's share and the same `seed`. Left to itself, Lightning
wraps torchdata's random sampler (not a torch `RandomSampler`) in its `DistributedSamplerWrapper`, which draws
each epoch's order from the inner sampler's generator, state that no checkpoint holds: a run resumed mid-epoch
after the first epoch then saw other batches than the uninterrupted one (found by the kill -9 resume test under
strategy=fsdp, tests/test_reliability.py). A `DistributedSampler`'s order depends only on (seed, epoch), and
Lightning calls its `set_epoch` and keeps a sampler that is one already.

Every loader here has its own `generator`: making a DataLoader's iterator draws the workers' base seed from it, and
without one from the global RNG, whose state the checkpoint restores. A resumed run makes its iterators at other
points than the uninterrupted one (once per run with persistent workers, after the restore), so a draw from the
global RNG shifts every later dropout mask. Evaluation loaders with workers need the same (image_folder.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

if TYPE_CHECKING:
    import pytorch_lightning as pl


def stateful_train_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    seed: int,
    num_workers: int = 0,
    trainer: pl.Trainer | None = None,
    pin_memory: bool = False,
    drop_last: bool = False,
    collate_fn: Callable[..., object] | None = None,
) -> StatefulDataLoader:
    """A shuffling, resumable training loader whose order depends only on `seed` (not on the global RNG); sharded
    over the data-parallel ranks of `trainer` (the datamodule's, None outside a run) when it has several."""
    shards = trainer.distributed_sampler_kwargs if trainer is not None else None  # {"num_replicas", "rank"} or None
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=None if shards else True,  # the sampler shuffles
        sampler=StatefulDistributedSampler(dataset, shuffle=True, seed=seed, **shards) if shards else None,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        generator=torch.Generator().manual_seed(seed),  # the workers' base seed, not from the global RNG
        pin_memory=pin_memory,
        drop_last=drop_last,
        collate_fn=collate_fn,  # None: torch's default; kept across a resume, as the loader is rebuilt alike
    )
