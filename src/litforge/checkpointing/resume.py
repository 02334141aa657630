"""What a training run continues, and where it writes: `resume=auto|<run folder>|<file.ckpt>` and `ckpt_path=`.

`decide` is the one home of that rule. The CLI calls it before Hydra starts (to run the resumed job in its old folder
with its old overrides, litforge.cli.preflight) and the training job calls it again for the checkpoint to fit from
(by then `resume=` names the file the CLI found, so both calls agree; a notebook's compose-API config gets the same
answer). `ckpt_path=<file>` starts a *new* run folder from a checkpoint; `resume=` continues a run *in its folder*.

A run is *interrupted* when its folder has a checkpoint but no `metrics.json` (written only when a run finishes).
`resume=auto` picks the newest interrupted run of the same `task_name` under `paths.log_dir`, or starts a new run when
there is none, so one command line serves both the first start and every restart of a pre-emptible job. A folder
another live run still holds (its `run.lock`, litforge.checkpointing.folders) is skipped with one line saying so, and
`resume=<that folder>` is refused.

Inside a SLURM job the run folder is `slurm-<job id>` (conf/hydra/default.yaml). When that folder already holds an
interrupted run, the job is a requeued (or restarted) attempt of itself: it continues from that checkpoint, with or
without `resume=auto`, instead of starting again at step 0 over it; every task of the job decides the same.
A sweep's job under `hydra/launcher=slurm` writes in its sweep folder (`multiruns/<sweep>/<job number>`), which its
requeued attempt gets again (submitit runs the same pickled call): when SLURM says the job was restarted
(`SLURM_RESTART_COUNT` > 0) and that folder holds an interrupted run, the attempt continues from it too
(:func:`slurm_sweep_job_run`), so neither `last.ckpt` nor the best-k files of the earlier attempt are written over.

The checkpoint of a run folder is the newest of `checkpoints/last.ckpt` (every epoch end, and on SIGTERM at
the current step) and `hpc_ckpt_<n>.ckpt` (Lightning's SLURM pre-emption save). Under strategy=fsdp/tp `last.ckpt` is a
sharded folder (a `.metadata` index and one file per rank, litforge.checkpointing.consolidate); when a kill fell between
the two renames of an atomic sharded save, `last.ckpt` is briefly missing and the previous one waits, whole, as
`.last.ckpt.previous` (litforge.parallel.strategies.ModelParallel.save_checkpoint): it is resumed then.
Torch-free: used before Hydra starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing.folders import live_holder
from litforge.checkpointing.load import recorded_task_class
from litforge.checkpointing.metadata import read_checkpoint
from litforge.core.errors import CheckpointError, ConfigError
from litforge.core.instantiate import to_plain
from litforge.runtime.ranks import is_rank_zero
from litforge.runtime.slurm import job_id, job_run_name

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
    """Run folders of `task_name` that hold a checkpoint and never finished, newest checkpoint first; a folder a live
    run holds is left out, with a line saying so."""
    runs = [p for p in (log_dir / task_name / "runs").glob("*") if p.is_dir() and not (p / FINISHED_MARKER).exists()]
    with_ckpt = [(ckpt.stat().st_mtime_ns, run) for run in runs if (ckpt := run_checkpoint(run)) is not None]
    found = []
    for _, run in sorted(with_ckpt, reverse=True):
        holder = live_holder(run) if is_rank_zero() else None  # other ranks: rank 0 and its launcher hold it
        if holder:
            print(f"litforge: resume=auto: skipping {run}, still running ({holder}, {run}/run.lock)", file=sys.stderr)
        else:
            found.append(run)
    return found


def slurm_job_run(log_dir: str | Path, task_name: str) -> Path | None:
    """This SLURM job's own run folder when it holds an interrupted run (a requeued attempt), else None."""
    if job_id() is None:
        return None
    runs = Path(log_dir) / task_name / "runs"
    run = runs / job_run_name(runs, "")
    return run if run_checkpoint(run) is not None and not (run / FINISHED_MARKER).exists() else None


def slurm_sweep_job_run(run_dir: str | Path | None, env: Mapping[str, str] = os.environ) -> Path | None:
    """A sweep job's own folder `run_dir` when this is a requeued attempt of its SLURM job (`SLURM_RESTART_COUNT` >
    0: the scheduler's count of this job's restarts) and the folder holds an interrupted run, else None. The first
    attempt never resumes: a folder of an earlier sweep under a fixed `hydra.sweep.dir` is not this job's."""
    restarts = env.get("SLURM_RESTART_COUNT", "").strip()
    if run_dir is None or job_id(env) is None or not (restarts.isdigit() and int(restarts) > 0):
        return None
    run = Path(run_dir)
    return run if run_checkpoint(run) is not None and not (run / FINISHED_MARKER).exists() else None


def refuse_live(run_dir: Path, value: str) -> None:
    """`resume=<a folder another live run writes in>`: refused, both would write one last.ckpt."""
    holder = live_holder(run_dir) if is_rank_zero() else None
    if holder:
        raise CheckpointError(
            f"resume={value}: {run_dir} is in use by a running job ({holder}; {run_dir}/run.lock): wait for it to "
            "end, or pass resume=auto to continue another interrupted run"
        )


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
        refuse_live(run_dir, value)
        return run_dir.resolve(), path.resolve()
    if path.is_dir():
        refuse_live(path, value)
        ckpt = run_checkpoint(path)
        if ckpt is None:
            raise CheckpointError(
                f"resume={value}: the folder holds no checkpoints/last.ckpt (or hpc_ckpt_*.ckpt) to "
                "resume from; pass a run folder such as logs/train/runs/<run>, or resume=auto"
            )
        return path.resolve(), ckpt.resolve()
    raise CheckpointError(
        f"resume={value} does not exist: pass resume=auto (the newest interrupted run under "
        f"{log_dir}/{task_name}/runs), a run folder, or a .ckpt file"
    )


@dataclass(frozen=True)
class Resume:
    """The decision: the checkpoint to fit from (None: from scratch), and the run folder to write in again (None: a
    new one). `asked` is the `resume=` value that was looked up (ckpt_path=last reads as auto), None when none was."""

    checkpoint: str | None = None
    run_dir: Path | None = None
    asked: str | None = None


def decide(
    resume: str | None,
    ckpt_path: str | None,
    log_dir: str | Path,
    task_name: str,
    *,
    in_multirun: bool = False,
    run_dir: str | Path | None = None,
) -> Resume:
    """What `resume=` and `ckpt_path=` continue; raises ConfigError for a pair that contradicts itself.

    `ckpt_path=last` is Lightning's word for "the latest checkpoint"; here it means `resume=auto`. `resume=auto` with
    no interrupted run starts a new run (`asked` set, nothing found), so one command line serves every restart.
    `run_dir`: the job's own folder in a multirun (a requeued SLURM sweep job continues there).
    """
    if ckpt_path == "last":
        if resume:
            raise ConfigError("pass either resume=... or ckpt_path=last, not both")
        resume, ckpt_path = "auto", None
    if not resume:
        if ckpt_path is not None:
            own = None
        else:
            own = slurm_sweep_job_run(run_dir) if in_multirun else slurm_job_run(log_dir, task_name)
        if own is not None:  # a requeued SLURM job: its own folder, its own checkpoint
            return Resume(checkpoint=str(own_checkpoint(own)), run_dir=own.resolve())
        return Resume(checkpoint=str(ckpt_path) if ckpt_path else None)
    if ckpt_path is not None:
        raise ConfigError(
            f"pass either resume={resume} (continue a run in its folder) or ckpt_path=<file> (start a "
            "new run folder from a checkpoint), not both"
        )
    if in_multirun:
        raise ConfigError("resume= continues one run; a sweep's jobs each take ckpt_path=<file> instead (or drop -m)")
    own = slurm_job_run(log_dir, task_name) if resume in ("auto", "last") else None
    found = (own.resolve(), own_checkpoint(own)) if own is not None else resolve(str(resume), log_dir, task_name)
    if found is None:
        return Resume(asked=str(resume))
    run_dir, checkpoint = found
    return Resume(checkpoint=str(checkpoint), run_dir=run_dir, asked=str(resume))


def own_checkpoint(run_dir: Path) -> Path:
    ckpt = run_checkpoint(run_dir)
    assert ckpt is not None  # slurm_job_run found one
    return ckpt.resolve()


def check_continues(
    path: str, recorded_task: str, configured_task: str, saved_net: dict[str, Any] | None, current_net: dict[str, Any]
) -> None:
    """A run continued from checkpoint `path` must train the task and the net that wrote it, or the weights cannot
    fit: the job's check (litforge.checkpointing.training.check_resumable) and the command line's
    (:func:`check_early`)."""
    if recorded_task != configured_task:
        raise ConfigError(
            f"{path} was written by task {recorded_task.rpartition('.')[2]}, but this run configures "
            f"{configured_task.rpartition('.')[2]}: resume with the same task= (and model=) as the original run"
        )
    if saved_net is not None and saved_net != current_net:
        raise ConfigError(
            f"{path} holds a different model than this run configures (checkpoint: {_describe(saved_net)}, "
            f"now: {_describe(current_net)}): pass the same model= and model.* overrides as the original run"
        )


def _describe(net: dict[str, Any]) -> str:
    target = str(net.get("_target_", "?")).rsplit(".", 1)[-1]
    knobs = ", ".join(f"{k}={v}" for k, v in net.items() if not k.startswith("_"))
    return f"{target}({knobs})"


def check_early(cfg: DictConfig, checkpoint: str | Path) -> None:
    """Before Hydra writes into a run folder: the checkpoint a training run continues or starts from is a readable
    litforge checkpoint of this run's task and net (:func:`check_continues`, read without torch:
    litforge.checkpointing.metadata). Where only the full load can tell (a sharded folder, a task named through
    another module), the job decides, and a refusal there leaves the folder as it was (litforge.checkpointing.folders).
    """
    loaded = read_checkpoint(checkpoint)  # a train config trusts no package: the job's full load trusts none either
    if loaded is None:
        return
    path = str(checkpoint)
    recorded, target = recorded_task_class(loaded, path), str(OmegaConf.select(cfg, "task._target_", default=""))
    if recorded.rpartition(".")[2] == target.rpartition(".")[2]:
        target = recorded  # the same class name: whether both name one class, the job's import tells
    hparams = loaded.get("hyper_parameters")
    saved_net = hparams.get("net") if isinstance(hparams, dict) else None
    try:
        current_net = to_plain(cfg.model)
    except Exception:  # a model config that does not resolve here: the job says what is wrong with it
        return
    check_continues(path, recorded, target, saved_net if isinstance(saved_net, dict) else None, current_net)


def resume_command_line(
    cfg: DictConfig, parsed: list[Any], overrides: list[str], compose: Callable[[list[str]], Any] | None = None
) -> list[str]:
    """Rewrite `resume=...` (or `ckpt_path=last`) into the resumed run's own overrides + `hydra.run.dir=<run>`, so
    Hydra reuses that folder with that run's overrides (yours win): its logs, events and checkpoints stay in one
    place. Called by litforge.cli.preflight before Hydra starts; `parsed` are Hydra's parsed `overrides`. The
    checkpoint is checked first (:func:`check_early`, on the config of the merged overrides that `compose` returns):
    a refused resume never reaches the run's folder, so its recorded overrides change only when it continues."""
    log_dir, task_name = str(cfg.paths.log_dir), str(cfg.task_name)
    decided = decide(cfg.resume, cfg.ckpt_path, log_dir, task_name)
    if decided.asked is None:  # a new run (from ckpt_path=<file>: checked with the job's checks, litforge.jobs.checks)
        return overrides
    mine = [o for o in parsed if o.key_or_group not in ("resume", "ckpt_path")]
    if decided.run_dir is None or decided.checkpoint is None:
        print(
            f"litforge: resume={decided.asked}: no interrupted run under {log_dir}/{task_name}/runs, starting a new "
            "run",
            file=sys.stderr,
        )
        return [o.input_line for o in mine]
    run_dir, ckpt = decided.run_dir, Path(decided.checkpoint)
    merged: dict[str, str] = {}
    for line in [*_saved_overrides(run_dir), *(o.input_line for o in mine)]:
        key = line.split("=", 1)[0].lstrip("+~")
        if key not in ("resume", "ckpt_path", "hydra.run.dir"):
            merged[key] = line  # later (yours) wins over the run's own
    continued = compose(list(merged.values())) if compose is not None else None
    if continued is not None:  # else Hydra names what does not compose, before the job runs
        check_early(continued, ckpt)
    print(f"litforge: resuming {run_dir} from {ckpt.name}", file=sys.stderr)
    return [*merged.values(), f"hydra.run.dir={_quote(run_dir)}", f"resume={_quote(ckpt)}"]


def _saved_overrides(run_dir: Path) -> list[str]:
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.exists():
        return []
    return [str(line) for line in (OmegaConf.load(saved) or [])]


def _quote(path: Path) -> str:
    """A path as a quoted Hydra override value (paths may hold characters the override grammar reserves)."""
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"
