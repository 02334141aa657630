"""Finding what to resume: `resume=auto`, `resume=<run folder>` or `resume=<file.ckpt>`.

A run is *interrupted* when its folder has a checkpoint but no `metrics.json` (written only when a run finishes).
`resume=auto` picks the newest interrupted run of the same `task_name` under `paths.log_dir`, or starts a new run when
there is none, so one command line serves both the first start and every restart of a pre-emptible job.

The checkpoint of a run folder is the newest of `checkpoints/last.ckpt` (every epoch end, and on SIGTERM at
the current step) and `hpc_ckpt_<n>.ckpt` (Lightning's SLURM pre-emption save). Under strategy=fsdp/tp `last.ckpt` is a
sharded folder (a `.metadata` index and one file per rank, litforge.parallel.consolidate); when a kill fell between
the two renames of an atomic sharded save, `last.ckpt` is briefly missing and the previous one waits, whole, as
`.last.ckpt.previous` (litforge.parallel.strategies.ModelParallel.save_checkpoint): it is resumed then.
Torch-free: used before Hydra starts.
"""

from __future__ import annotations

from pathlib import Path

from litforge.core.errors import CheckpointError

FINISHED_MARKER = "metrics.json"


PREVIOUS_PREFIX, PREVIOUS_SUFFIX = ".", ".previous"  # `.last.ckpt.previous`: the old sharded folder mid-swap


def is_sharded_checkpoint(path: Path) -> bool:
    """A complete torch distributed checkpoint folder: its `.metadata` index is written last, atomically, by DCP."""
    return path.is_dir() and (path / ".metadata").is_file()


def is_checkpoint(path: Path) -> bool:
    """A non-empty checkpoint file or a complete sharded checkpoint folder."""
    return (path.is_file() and path.stat().st_size > 0) or is_sharded_checkpoint(path)


def previous_of(path: Path) -> Path:
    """Where an atomic sharded save keeps the old folder while it swaps the new one in (removed right after)."""
    return path.with_name(f"{PREVIOUS_PREFIX}{path.name}{PREVIOUS_SUFFIX}")


def run_checkpoint(run_dir: Path) -> Path | None:
    """The newest resumable checkpoint of a run folder (a non-empty file or a complete sharded folder), or None."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if not is_checkpoint(last):  # killed between the swap's renames: the previous sharded last.ckpt is whole
        last = previous_of(last)
    candidates = [last, *run_dir.glob("hpc_ckpt_*.ckpt")]
    found = [p for p in candidates if is_checkpoint(p)]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def interrupted_runs(log_dir: Path, task_name: str) -> list[Path]:
    """Run folders of `task_name` that hold a checkpoint and never finished, newest checkpoint first."""
    runs = [p for p in (log_dir / task_name / "runs").glob("*") if p.is_dir() and not (p / FINISHED_MARKER).exists()]
    with_ckpt = [(ckpt.stat().st_mtime_ns, run) for run in runs if (ckpt := run_checkpoint(run)) is not None]
    return [run for _, run in sorted(with_ckpt, reverse=True)]


def resolve(value: str | None, log_dir: str | Path, task_name: str) -> tuple[Path, Path] | None:
    """(run folder, checkpoint) for a `resume=` value; None for no value, or for `auto` with nothing to resume."""
    if value in (None, "", "null", "none", "false"):
        return None
    if value in ("auto", "last"):
        runs = interrupted_runs(Path(log_dir), task_name)
        checkpoint = run_checkpoint(runs[0]) if runs else None
        return (runs[0].resolve(), checkpoint.resolve()) if checkpoint is not None else None  # listed runs hold one
    path = Path(value).expanduser()
    if path.is_file() or is_sharded_checkpoint(path):
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return run_dir.resolve(), path.resolve()
    if path.is_dir():
        ckpt = run_checkpoint(path)
        if ckpt is None:
            raise CheckpointError(f"resume={value}: the folder holds no checkpoints/last.ckpt (or hpc_ckpt_*.ckpt) to "
                                  "resume from; pass a run folder such as logs/train/runs/<run>, or resume=auto")
        return path.resolve(), ckpt.resolve()
    raise CheckpointError(f"resume={value} does not exist: pass resume=auto (the newest interrupted run under "
                          f"{log_dir}/{task_name}/runs), a run folder, or a .ckpt file")
