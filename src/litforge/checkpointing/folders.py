"""The checks every folder litforge writes to gets: it exists (or can be made), takes a file, has room, and is not
another run's.

Used before Hydra starts (`paths.log_dir`, litforge.cli.preflight) and again by the training job for its run folder.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from litforge.core.errors import ConfigError


def check_folder(folder: Path, min_free_mb: float, key: str = "paths.log_dir") -> None:
    """`folder` exists or can be created, accepts a file, and has `min_free_mb` free; else a ConfigError saying so.

    A real write is the only reliable test: permission bits do not stop root, and a read-only or full filesystem
    only shows itself on write.
    """
    fix = f"pass {key}=<a writable folder>"
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{key}={folder}: {parent} is a file, not a folder; {fix}")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"litforge write probe")
            probe.flush()
    except OSError as exc:
        raise ConfigError(f"cannot write to {key}={folder} ({exc.strerror or exc}); {fix}") from None
    if min_free_mb > 0:
        free_mb = shutil.disk_usage(folder).free / 2**20
        if free_mb < min_free_mb:
            raise ConfigError(
                f"only {free_mb:.0f} MB free under {key}={folder}, and runs need paths.min_free_mb={min_free_mb:g} "
                f"MB for checkpoints and logs: free some space, {fix} on a larger disk, or pass paths.min_free_mb=0 "
                "to skip this check"
            )


def check_not_another_run(folder: Path) -> None:
    """`hydra.run.dir=<another run>` would overwrite that run's checkpoints, metrics and overrides: a run writes only
    into a folder of its own (resume= continues one in place)."""
    held = [n for n in (".hydra", "checkpoints", "metrics.json") if (folder / n).exists()]
    if held:
        raise ConfigError(
            f"hydra.run.dir={folder} is the folder of another run (it holds {', '.join(held)}): a run never writes "
            f"into another's; continue it with resume={folder}, or pass a new folder"
        )
