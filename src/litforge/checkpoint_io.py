"""Crash-safe checkpoint writes: a checkpoint file on disk is always either the old one or the new one, whole.

Lightning's `TorchCheckpointIO` (2.6) serialises into memory, writes it to a temporary file from `tempfile.mkstemp()`
(the system temp folder) and `shutil.move`s it into place. When `/tmp` and `logs/` are on different filesystems (the
usual case on clusters) that move is a *copy*, so a crash during it leaves a truncated `last.ckpt`; nothing is
fsync'ed, so a power loss can leave an empty file after the rename; and a killed process leaves a checkpoint-sized
orphan in `/tmp`. This plugin writes straight into a hidden temporary file *in the target folder*, fsyncs it, renames
it over the target with `os.replace` (atomic within one filesystem) and fsyncs the folder so the rename itself is
durable.

Selected with `trainer.plugins` (conf/trainer/default.yaml); Lightning routes every save of a single-file checkpoint
through it (ModelCheckpoint's best/last files, `trainer.save_checkpoint`, the on-signal checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

PARTIAL_SUFFIX = ".partial"  # `.last.ckpt.partial`: what a crash mid-write leaves behind (replaced by the next save)


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose writes are atomic and durable on local and network filesystems."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str], storage_options: Any | None = None) -> None:
        target = Path(path)
        if "://" in str(path):  # remote URLs (s3://, gs://): object stores are atomic per object already
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} does not take storage_options")
        target.parent.mkdir(parents=True, exist_ok=True)
        # a fixed name (not a random one): a crash leaves at most one partial file per checkpoint name
        partial = target.with_name(f".{target.name}{PARTIAL_SUFFIX}")
        try:
            with open(partial, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        fsync_directory(target.parent)


def fsync_directory(folder: Path) -> None:
    """Make a rename inside `folder` durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
