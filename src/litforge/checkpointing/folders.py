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

import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path

from litforge.core.errors import ConfigError
from litforge.runtime.slurm import job_id, job_is_running

LOCK_NAME = "run.lock"


def check_folder(folder: Path, min_free_mb: float, key: str = "paths.log_dir") -> None:
    """`folder` exists or can be created, accepts a file, and has `min_free_mb` free; else a ConfigError saying so.

    A real write is the only reliable test: permission bits do not stop root, and a read-only or full filesystem
    only shows itself on write. The folders the test made are removed again: a check writes nothing (a refusal that
    comes after it, e.g. in another job of a sweep, leaves no empty log folder behind).
    """
    fix = f"pass {key}=<a writable folder>"
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{key}={folder}: {parent} is a file, not a folder; {fix}")
            break
    made = [p for p in [folder, *folder.parents] if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"litforge write probe")
            probe.flush()
        free_mb = shutil.disk_usage(folder).free / 2**20
    except OSError as exc:
        raise ConfigError(f"cannot write to {key}={folder} ({exc.strerror or exc}); {fix}") from None
    finally:
        for empty in made:
            with contextlib.suppress(OSError):
                empty.rmdir()
    if 0 < min_free_mb and free_mb < min_free_mb:
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
