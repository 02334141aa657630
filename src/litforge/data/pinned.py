"""Pinned (page-locked) host memory for loaders that feed a CUDA device.

A batch in pinned memory copies to the GPU asynchronously (Lightning moves batches with `non_blocking=True`), so
the copy overlaps the previous step instead of stalling it. Pinning costs a page-locked staging copy per batch and
does nothing for a CPU run (on a machine without a driver it even fails), so it is on only when the trainer's root
device is CUDA. In-memory and on-device loaders never go through a DataLoader and need none of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytorch_lightning as pl


def pin_memory_for(trainer: pl.Trainer | None) -> bool:
    """True when the loaders of a datamodule attached to `trainer` feed a CUDA device."""
    if trainer is None:
        return False
    try:
        return trainer.strategy.root_device.type == "cuda"
    except (AttributeError, RuntimeError):  # a trainer not set up yet has no root device
        return False
