"""Training loaders that resume mid-epoch exactly, with worker processes too: torchdata's `StatefulDataLoader`.

A plain `torch.utils.data.DataLoader` has no `state_dict`, so a run resumed mid-epoch re-reads that epoch in a new
order (Lightning warns "your dataloader is not resumable"). `StatefulDataLoader` is a drop-in DataLoader that saves
its sampler (the shuffle generator's state) and the batches already handed out, also with `num_workers > 0`;
Lightning stores that state in every checkpoint and hands it back on resume (it saves and restores any training
loader with `state_dict`/`load_state_dict`). Evaluation loaders stay plain DataLoaders: they always start at 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset


def stateful_train_loader(dataset: Dataset, *, batch_size: int, seed: int, num_workers: int = 0,
                          **kwargs: Any) -> Any:
    """A shuffling, resumable training loader whose order depends only on `seed` (not on the global RNG)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                              persistent_workers=num_workers > 0, generator=torch.Generator().manual_seed(seed),
                              **kwargs)
