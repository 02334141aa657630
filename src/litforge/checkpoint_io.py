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

from litforge.errors import ConfigError

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


def with_async_saves(plugins: Any, strategy: Any) -> list[Any]:
    """`trainer.plugins` with its checkpoint plugin wrapped in Lightning's `AsyncCheckpointIO` (`checkpoint_async=true`).

    The write then runs in one background thread while training continues; the checkpoint's tensors are cloned on
    the training thread first (a point-in-time copy), and the wrapped plugin is still :class:`AtomicCheckpointIO`, so
    a kill during the background write leaves the previous file whole. Writes run one at a time, in order, and the
    trainer waits for the last one when fit ends (also on SIGTERM / time_limit exits).

    Sharded strategies (fsdp, tp, fsdp2_tp, deepspeed) write distributed checkpoints, which this plugin does not
    cover (torch.distributed.checkpoint.async_save would): refused in one line until that lands.
    """
    from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
    from pytorch_lightning.plugins.io import AsyncCheckpointIO
    from pytorch_lightning.strategies import DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy

    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    sharded = isinstance(strategy, (DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy)) or (
        isinstance(strategy, str) and any(word in strategy.lower() for word in ("fsdp", "deepspeed")))
    if sharded:
        raise ConfigError(f"checkpoint_async=true writes single-file checkpoints in the background; strategy {name} "
                          "writes sharded ones, which it cannot do yet: drop checkpoint_async (or use strategy=ddp)")
    plugins = list(plugins or [])
    for i, plugin in enumerate(plugins):
        if isinstance(plugin, AsyncCheckpointIO):
            return plugins
        if isinstance(plugin, CheckpointIO):
            plugins[i] = AsyncCheckpointIO(plugin)
            return plugins
    return [*plugins, AsyncCheckpointIO(AtomicCheckpointIO())]
