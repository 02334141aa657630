"""What produced a run: `provenance.json` (and `provenance.diff` when the tree was dirty) in every run folder.

A config alone does not reproduce a run: the code (git commit, uncommitted changes), the installed packages and the
hardware matter as much. The training job writes this file when it starts and again, with the end time and how the
run ended, when it stops; a resumed run keeps the earlier starts under `"previous"`, so nothing is lost. The commit
(and the dirty flag) also go into every checkpoint (litforge.callbacks.provenance), so `eval.py` can say which code
trained the weights it tests, and trackers (MLflow) receive the file as an artifact.

Nothing here needs a GPU or the network: `git` is asked for the commit if it is installed and the source is a
checkout; otherwise the commit is recorded as null (an installed wheel has no git history).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from litforge.runtime.ranks import is_rank_zero

FILE = "provenance.json"
DIFF_FILE = "provenance.diff"
CHECKPOINT_KEY = "litforge_provenance"  # extra checkpoint entry: {"commit": ..., "dirty": ...}
SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the checkout litforge runs from (src/litforge/records → ../../..)


def now() -> str:
    """The current UTC time, ISO 8601 with seconds: what `start` / `end` hold."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_state(root: Path = SOURCE_ROOT) -> dict[str, Any]:
    """{"commit", "branch", "dirty", "diff"} of the checkout at `root`; commit null when it is not a git checkout.

    `diff` is `git diff HEAD` (tracked files, staged or not); `dirty` also counts untracked files that git does
    not ignore, which the diff cannot hold: their names are listed under `untracked`.
    """

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "branch": None, "dirty": None, "diff": "", "untracked": []}
    status = git("status", "--porcelain", "--untracked-files=normal") or ""
    untracked = [line[3:] for line in status.splitlines() if line.startswith("??")]
    return {
        "commit": commit.strip(),
        "branch": (git("rev-parse", "--abbrev-ref", "HEAD") or "").strip() or None,
        "dirty": bool(status.strip()),
        "diff": git("diff", "HEAD") or "",
        "untracked": untracked,
    }


def environment() -> dict[str, Any]:
    """Python, torch / CUDA / cuDNN versions, device names, host and every installed package's version."""
    cuda = torch.cuda.is_available()
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    packages = installed_packages()
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,  # the CUDA torch was built with (null for a CPU build)
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "devices": devices or [f"cpu: {platform.processor() or platform.machine()}"],
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "packages": dict(sorted(packages.items())),
    }


def installed_packages(path: list[str] | None = None) -> dict[str, str]:
    """Every installed distribution's version, by its canonical name (PEP 503: `pytorch-lightning`, `pyyaml`).

    Read from the names of the `<name>-<version>.dist-info` folders on `sys.path` (the wheel format's layout): one
    directory listing per path entry. `importlib.metadata.distributions()` parses every METADATA file instead, 0.4 s
    for the ~600 packages of this project's environment at the start of every run. A folder whose name carries no
    version (legacy `.egg-info`, some editable installs) is read through importlib.metadata. As for imports, the
    first entry of `sys.path` that holds a package wins.
    """
    found: dict[str, str] = {}
    for entry in sys.path if path is None else path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            stem, _, _ = name.rpartition(".")
            dist, dash, version = stem.partition("-")
            if name.endswith(".dist-info") and dash and version:
                found.setdefault(canonical_name(dist), version)
                continue
            try:
                meta = metadata.Distribution.at(Path(entry or ".") / name)
                if meta.metadata["Name"]:
                    found.setdefault(canonical_name(meta.metadata["Name"]), meta.version)
            except (OSError, ValueError):
                continue
    return found


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it (`PyYAML` → `pyyaml`, `pytorch_lightning` → `pytorch-lightning`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def collect(root: Path = SOURCE_ROOT) -> tuple[dict[str, Any], str]:
    """(the provenance record, the diff text) for a run starting now."""
    git = git_state(root)
    diff = git.pop("diff")
    record = {
        "start": now(),
        "end": None,
        "status": "running",
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "git": git,
        **environment(),
    }
    return record, diff


def write_start(
    run_dir: Path, root: Path = SOURCE_ROOT, settings: dict[str, Any] | None = None, tags: list[Any] | None = None
) -> dict[str, Any]:
    """Write `provenance.json` (+ `provenance.diff` when dirty) for a run starting now; returns the record. `tags`:
    the run's `tags=` (a training run's labels), recorded as given.

    A resumed run finds the file of its earlier attempts: those records move under `"previous"` (newest last), and
    an earlier diff is kept as `provenance.<n>.diff` when the code changed in between, so no attempt's record is lost.
    """
    record, diff = collect(root)
    if settings:  # process-wide switches the run changed (matmul precision): not visible in the config alone
        record["settings"] = dict(settings)
    if tags is not None:
        record["tags"] = [*tags]
    path = run_dir / FILE
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            earlier = None
        if isinstance(earlier, dict):
            previous = earlier.pop("previous", [])
            record["previous"] = [*previous, earlier]
            old_diff = run_dir / DIFF_FILE
            if old_diff.is_file():
                old_diff.rename(run_dir / f"provenance.{len(record['previous'])}.diff")
    if diff:
        (run_dir / DIFF_FILE).write_text(diff)
    record["git"]["diff_file"] = DIFF_FILE if diff else None
    _write(path, record)
    return record


def write_end(run_dir: Path, record: dict[str, Any], status: str) -> None:
    """Record how and when the run ended: `finished`, `failed` or `stopped` (SIGTERM, Ctrl-C)."""
    record.update(end=now(), status=status)
    _write(run_dir / FILE, record)


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The few facts a checkpoint carries: the commit, whether the tree was dirty, when the run started."""
    git = record.get("git") or {}
    return {"commit": git.get("commit"), "dirty": git.get("dirty"), "start": record.get("start")}


def describe_origin(checkpoint: dict[str, Any]) -> str:
    """One line naming the code a checkpoint came from, for `eval.py` (older checkpoints say that they do not know)."""
    origin = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(origin, dict) or not origin.get("commit"):
        return "unknown (the checkpoint records no git commit)"
    dirty = " + uncommitted changes (see the run's provenance.diff)" if origin.get("dirty") else ""
    return f"{origin['commit']}{dirty}"


def _write(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)


def start_record(run_dir: Path, matmul_precision: str | None, tags: list[str | int]) -> dict[str, Any]:
    """A training run's provenance (with its `tags=`), written at its start by rank 0 (the other ranks keep only what
    their checkpoints carry); `matmul_precision`: what float32 matmuls use, a process-wide switch no config shows."""
    if is_rank_zero():
        return write_start(run_dir, settings={"matmul_precision": matmul_precision}, tags=tags)
    return {"git": git_state(), "start": now()}
