"""The checks every folder litforge writes to gets: it exists (or can be made), takes a file, has room, and is not
another run's; and the mark of a run folder in use.

Used before Hydra starts (`paths.log_dir`, litforge.cli.preflight) and again by the training job for its run folder.

A training run marks its folder while it runs: `run.lock` holds the SLURM job id, the host and the process id of
rank 0, and is removed when the run ends (finished, stopped by a signal or a time limit, or failed with an
exception). A lock left by a kill -9 or a lost node is *stale*: its process is gone (same host), or its SLURM job is
no longer running (another host, asked through `squeue`). `resume=auto` skips a folder whose lock is live and
`resume=<that folder>` refuses it (litforge.checkpointing.resume), so a second job never writes into a running one's
folder. A lock of this very job (a requeued attempt, another task of the same `srun`) is not another run's.

A refused command writes nothing (docs/reliability.md). Most refusals come before Hydra makes or opens a run folder
(litforge.cli.preflight); one that only the job can make comes after Hydra wrote `.hydra/` and the log there, and after
the job wrote `provenance.json`. :class:`NoteRunFolder` (a Hydra callback, conf/hydra/default.yaml) notes the run
folder just before Hydra touches it, and the entry (litforge.cli.main) puts it back on a refusal with
:func:`undo_refused`: a folder the command made is removed, a folder that was there (a resumed run) gets its
`.hydra/`, log and provenance back byte for byte, and loses what else the attempt added (a logger's first event
file). Only while the job wrote no checkpoint and no metrics.json: those mean the run really ran, and its folder is
left as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from litforge.core.errors import ConfigError
from litforge.runtime.ranks import is_rank_zero
from litforge.runtime.slurm import job_id, job_is_running

LOCK_NAME = "run.lock"


def check_folder(folder: Path, min_free_mb: float, key: str = "paths.log_dir") -> None:
    """`folder` exists or can be created, accepts a file, and has `min_free_mb` free; else a ConfigError saying so.

    A real write is the only reliable test: permission bits do not stop root, and a read-only or full filesystem
    only shows itself on write. The folders the test made are removed again: a check writes nothing (a refusal that
    comes after it, e.g. in another job of a sweep, leaves no empty log folder behind).
    """
    fix = f"pass {key}=<a writable folder>"
    if (file := file_in_the_way(folder, itself=True)) is not None:
        raise ConfigError(f"{key}={folder}: {file} is a file, not a folder; {fix}")
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


def file_in_the_way(path: Path, itself: bool = False) -> Path | None:
    """The file that stands where `path` needs a folder (its nearest existing parent, or itself where `itself`)."""
    existing = next((p for p in [*([path] if itself else []), *path.parents] if p.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


# the keys that name a file or folder (`output`, `paths.log_dir`, `data.root`, `hydra.run.dir`, `ckpt_path`, ...)
PATH_KEY = re.compile(r"(^|_)(dir|dirpath|path|root|output|input)$")


def check_paths_in_folders(cfg: DictConfig, overrides: list[Any]) -> None:
    """Every path the config names (predict's and prepare's `output=`, `paths.*`, `hydra.run.dir`, ...) lies in
    folders: a file in the way would fail only at the first write, after the work (a FileExistsError)."""

    def leaves(node: object, key: str) -> list[tuple[str, object]]:
        if isinstance(node, dict):
            return [kv for k, v in node.items() for kv in leaves(v, f"{key}.{k}".lstrip("."))]
        return [(key, node)]

    for o in [o for o in overrides if not o.is_sweep_override() and o.value() == ""]:  # `ckpt_path=$CKPT`, unset
        if PATH_KEY.search(o.key_or_group.rsplit(".", 1)[-1]) or o.key_or_group == "resume":
            raise ConfigError(
                f"{o.key_or_group}= is empty (a shell variable that is not set?): pass {o.key_or_group}=<a path>, or "
                f"{o.key_or_group}=null for none"
            )
    typed = [(o.key_or_group, o.value()) for o in overrides if o.key_or_group.startswith("hydra.")]
    for value in [v for k, v in typed if k == "hydra.sweep.dir"]:  # its jobs 0, 1, ... are written there
        sweep = Path(str(value))  # another run's or grid sweep's results; an Optuna sweep's folder resumes its study
        if held_results(sweep, (*RUN_MARKS, "multirun.yaml", "summary.md")) and not (sweep / "optuna.db").exists():
            raise ConfigError(
                f"hydra.sweep.dir={value} holds the results of another run or sweep, whose folders this sweep's jobs "
                "would overwrite: pass a new folder (an Optuna search resumes in its own, which holds optuna.db)"
            )
    named_paths = [*leaves(OmegaConf.to_container(cfg, resolve=False), ""), *typed]
    for key, value in named_paths:
        named = isinstance(value, str) and "${" not in value and "://" not in value
        if named and PATH_KEY.search(key.rsplit(".", 1)[-1]) and (file := file_in_the_way(Path(value))) is not None:
            raise ConfigError(f"{key}={value}: {file} is a file, not a folder; pass {key}=<a path in a folder>")
        if not (named and key == "output" and Path(value).is_file()):
            continue
        run = next((p for p in Path(value).parents if (p / ".hydra").is_dir()), None)
        if run is not None:  # a file of a run: its checkpoint, its metrics.json
            raise ConfigError(
                f"output={value} would overwrite a file of the run {run}: runs keep what they wrote; pass "
                "output=<a new path> (or null: the new run's own folder)"
            )
        for other, read in [(k, v) for k, v in named_paths if k != key and isinstance(v, str) and Path(v).is_file()]:
            if Path(read).samefile(value):  # predict.py input=data.csv output=data.csv: the data replaced
                new = Path(value).with_name(f"{Path(value).stem}.predictions.csv") if other == "input" else None
                raise ConfigError(
                    f"output={value} is also {other}={read}: the output would replace it; pass output=<a new path>"
                    + (f", e.g. output={new}" if new else "")
                )


RUN_MARKS = (".hydra", "checkpoints", "metrics.json")  # what a run's folder holds


def held_results(folder: Path, marks: tuple[str, ...]) -> list[str]:
    """Which of `marks` `folder` holds: a folder holding any is another run's (or sweep's), never written into."""
    return [n for n in marks if (folder / n).exists()]


def check_not_another_run(folder: Path) -> None:
    """`hydra.run.dir=<another run>` would overwrite that run's checkpoints, metrics and overrides: a run writes only
    into a folder of its own (resume= continues one in place)."""
    held = held_results(folder, RUN_MARKS)
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


# ---- a refused command writes nothing ------------------------------------------------------------------------------
KEPT_BYTES = 2**20  # a bookkeeping file up to this size is kept whole; a longer one (a long run's log) by its size


def is_bookkeeping(relative: str) -> bool:
    """What Hydra and a job's start write into a run folder and change in place: `.hydra/`, `<job>.log`,
    `provenance.*` and the `run.lock` mark."""
    if relative.startswith(".hydra/"):
        return True
    top_level = "/" not in relative
    return top_level and (relative.endswith(".log") or relative.startswith(("provenance.", LOCK_NAME, f".{LOCK_NAME}")))


def is_of_value(relative: str) -> bool:
    """What makes a run a run: a checkpoint (a file, or a sharded folder's part) or its final metrics."""
    return relative.startswith("checkpoints/") or relative.endswith(".ckpt") or relative == "metrics.json"


@dataclass
class FolderBefore:
    """A folder as it was before a command: whether it existed, its files' (size, mtime), its bookkeeping files'
    bytes, its sub-folders, and the nearest folder above it that existed."""

    folder: Path
    existed: bool
    above: Path
    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    kept: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)


def _scan(folder: Path) -> tuple[dict[str, tuple[int, int]], set[str]]:
    files: dict[str, tuple[int, int]] = {}
    dirs: set[str] = set()
    for root, subdirs, names in os.walk(folder):
        where = Path(root).relative_to(folder)
        dirs.update((where / d).as_posix() for d in subdirs)
        for name in names:
            stat = (Path(root) / name).stat(follow_symlinks=False)
            files[(where / name).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return files, dirs


def note_folder(folder: Path) -> FolderBefore:
    """`folder` as it is now, to be put back by :func:`undo_refused`."""
    folder = folder.absolute()
    above = next(p for p in folder.parents if p.exists())
    if not folder.is_dir():
        return FolderBefore(folder, existed=False, above=above)
    files, dirs = _scan(folder)
    kept = {r: (folder / r).read_bytes() for r, (size, _) in files.items() if is_bookkeeping(r) and size <= KEPT_BYTES}
    return FolderBefore(folder, existed=True, above=above, files=files, kept=kept, dirs=dirs)


def undo_refused(before: FolderBefore) -> bool:
    """Put `before.folder` back as it was before a refused command: the files it added are removed (the folder
    itself when the command made it), the bookkeeping it changed is restored. False, with nothing done, where the
    command wrote something of value (:func:`is_of_value`) or changed a file that cannot be put back: that run ran."""
    folder = before.folder
    if not folder.is_dir():
        return True
    files, dirs = _scan(folder)
    changed = {r for r in files.keys() | before.files.keys() if files.get(r) != before.files.get(r)}
    if any(is_of_value(r) or (r in before.files and not is_bookkeeping(r)) for r in changed):
        return False
    if not before.existed:
        shutil.rmtree(folder)
        for parent in folder.parents:  # the folders above it this command made, while empty
            if parent == before.above or not parent.is_relative_to(before.above) or any(parent.iterdir()):
                break
            parent.rmdir()
        return True
    for relative in files.keys() - before.files.keys():
        (folder / relative).unlink()
    for relative in sorted(changed & before.files.keys()):
        path, (size, mtime) = folder / relative, before.files[relative]
        if relative in before.kept:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(before.kept[relative])
        elif path.is_file() and path.stat().st_size > size:
            os.truncate(path, size)  # a long log: the lines this command appended
        if path.is_file():
            os.utime(path, ns=(mtime, mtime))
    for relative in sorted(dirs - before.dirs, key=len, reverse=True):
        if not any((folder / relative).iterdir()):
            (folder / relative).rmdir()
    return True


_noted: list[FolderBefore] = []  # the run folder of this process's single run, noted before Hydra touched it


class NoteRunFolder(Callback):
    """Hydra callback: note the run folder before Hydra makes it or writes into it (`hydra.run.dir` resolves to the
    same folder here as in Hydra's run_job: its resolvers `now`, `uid` and `run_name` cache their value)."""

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        _noted.clear()
        folder = Path(str(config.hydra.run.dir))
        if not is_rank_zero() or config.hydra.output_subdir is None:  # other ranks, a dry run: they write nothing there
            return
        if not folder.exists() or (folder / ".hydra").is_dir():  # not a folder of the user's own (it is not undone)
            _noted.append(note_folder(folder))


def undo_noted_folder() -> bool:
    """After a refusal in a single run's job: :func:`undo_refused` on the folder :class:`NoteRunFolder` noted."""
    try:
        return bool(_noted) and undo_refused(_noted.pop())
    except OSError:  # a folder that changed under it: left as it is, the refusal's own line still comes
        return False
