"""The checks every folder litforge writes to gets: it exists (or can be made), takes a file, has room, and is not
another run's; and the mark of a run folder in use.

Used before Hydra starts (`paths.log_dir`, litforge.cli.preflight) and again by the training job for its run folder.

A training run marks its folder while it runs: `run.lock` holds the SLURM job id, the host and the process id of
rank 0, and is removed when the run ends (finished, stopped by a signal or a time limit, or failed with an
exception). A lock left by a kill -9 or a lost node is *stale*: its process is gone (same host), or its SLURM job is
no longer running (another host, asked through `squeue`). `resume=auto` skips a folder whose lock is live and
`resume=<that folder>` refuses it (litforge.checkpointing.resume), so a second job never writes into a running one's
folder. A lock of this very job (a requeued attempt, another task of the same `srun`) is not another run's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litforge.core.errors import ConfigError
from litforge.runtime.slurm import job_id, job_is_running

LOCK_NAME = "run.lock"


def check_folder(folder: Path, min_free_mb: float, key: str = "paths.log_dir") -> None:
    """`folder` exists or can be created, accepts a file, and has `min_free_mb` free; else a ConfigError saying so.

    A real write is the only reliable test: permission bits do not stop root, and a read-only or full filesystem
    only shows itself on write.
    """
    fix = f"pass {key}=<a writable folder>"
    if (file := file_in_the_way(folder, itself=True)) is not None:
        raise ConfigError(f"{key}={folder}: {file} is a file, not a folder; {fix}")
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


def file_in_the_way(path: Path, itself: bool = False) -> Path | None:
    """The file that stands where `path` needs a folder (its nearest existing parent, or itself where `itself`)."""
    existing = next((p for p in [*([path] if itself else []), *path.parents] if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


# the keys that name a file or folder (`output`, `paths.log_dir`, `data.root`, `hydra.run.dir`, `ckpt_path`, ...)
PATH_KEY = re.compile(r"(^|_)(dir|dirpath|path|root|output|input)$")


def check_paths_in_folders(cfg: Any, overrides: list[Any]) -> None:
    """Every path the config names (predict's and prepare's `output=`, `paths.*`, `hydra.run.dir`, ...) lies in
    folders: a file in the way would fail only at the first write, after the work (a FileExistsError)."""
    from omegaconf import OmegaConf

    def leaves(node: Any, key: str) -> list[tuple[str, Any]]:
        if isinstance(node, dict):
            return [kv for k, v in node.items() for kv in leaves(v, f"{key}.{k}".lstrip("."))]
        return [(key, node)]

    typed = [(o.key_or_group, o.value()) for o in overrides if o.key_or_group.startswith("hydra.")]
    for key, value in [*leaves(OmegaConf.to_container(cfg, resolve=False), ""), *typed]:
        named = isinstance(value, str) and "${" not in value and "://" not in value
        if named and PATH_KEY.search(key.rsplit(".", 1)[-1]) and (file := file_in_the_way(Path(value))) is not None:
            raise ConfigError(f"{key}={value}: {file} is a file, not a folder; pass {key}=<a path in a folder>")


def check_not_another_run(folder: Path) -> None:
    """`hydra.run.dir=<another run>` would overwrite that run's checkpoints, metrics and overrides: a run writes only
    into a folder of its own (resume= continues one in place)."""
    held = [n for n in (".hydra", "checkpoints", "metrics.json") if (folder / n).exists()]
    if held:
        raise ConfigError(
            f"hydra.run.dir={folder} is the folder of another run (it holds {', '.join(held)}): a run never writes "
            f"into another's; continue it with resume={folder}, or pass a new folder"
        )


def hold_run_folder(folder: Path, env: Mapping[str, str] = os.environ) -> Path:
    """Mark `folder` as in use by this process (rank 0 calls it); returns the lock file."""
    lock = folder / LOCK_NAME
    record = {"job_id": job_id(env), "host": socket.gethostname(), "pid": os.getpid()}
    scratch = lock.with_name(f".{LOCK_NAME}.{os.getpid()}")
    scratch.write_text(json.dumps(record) + "\n")
    os.replace(scratch, lock)  # whole or absent, never half-written
    return lock


def release_run_folder(folder: Path) -> None:
    """Remove this process's mark on `folder` (a mark of another process is left alone)."""
    lock = folder / LOCK_NAME
    if (_read_lock(lock) or {}).get("pid") == os.getpid():
        lock.unlink(missing_ok=True)


def live_holder(folder: Path, env: Mapping[str, str] = os.environ) -> str | None:
    """Who holds `folder` while still running ("job 12 on host n1 (pid 345)"), None when nobody else does."""
    record = _read_lock(folder / LOCK_NAME)
    if record is None:
        return None
    job, host, pid = record.get("job_id"), record.get("host"), record.get("pid")
    mine = job_id(env)
    if job is not None and job == mine:
        return None  # this job: an earlier attempt (requeue) or a sibling task
    if host == socket.gethostname():
        if pid in (os.getpid(), os.getppid()) or not isinstance(pid, int) or not _alive(pid):
            return None
    elif job is not None and job_is_running(str(job)) is False:
        return None  # its job ended on another node
    return f"{'job ' + str(job) + ' ' if job else ''}on host {host} (pid {pid})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) no longer writes anything
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _read_lock(lock: Path) -> dict | None:
    try:
        record = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
