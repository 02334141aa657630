"""Multirun bookkeeping: each job records its result, and the sweep folder keeps a ranked summary of all of them.

Written as a Hydra callback (`hydra.callbacks.sweep_summary`), so it works with every launcher and sweeper. Each
job writes `result.json` into its own folder when it ends (completed or failed), then the summary is rebuilt from
all `result.json` files; a job that fails therefore never hides the results of the others, and parallel launchers
(joblib, submitit) never write the same file at once except through an atomic rename.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from litforge.runtime.compat import job_error
from litforge.runtime.ranks import in_multirun, is_rank_zero
from litforge.runtime.requeue import requeued_job

RESULT_FILE = "result.json"
PRUNED = "PRUNED"  # a job the Optuna sweeper's pruner stopped early: kept, listed after the completed ones
REQUEUED = "REQUEUED"  # a SLURM job saved and requeued at its time limit; its next attempt's record replaces this
RESULT_KEYS = ("objective", "metrics", "best_checkpoint")  # what a job's result.json takes from its metrics.json
SWEEP_FILE = "sweep.json"  # the sweep's command-line overrides (written when it starts)
# overrides the summary leaves out: plumbing the sweeper adds to each trial (still in each job's overrides.yaml)
PLUMBING = ("++callbacks.optuna_pruning=",)


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        """The sweep's own command line, kept in the sweep folder: what tells its swept keys from its constants."""
        if is_rank_zero():
            atomic_write(Path(config.hydra.sweep.dir) / SWEEP_FILE, json.dumps(list(config.hydra.overrides.task)))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: object) -> None:
        if not in_multirun() or not is_rank_zero():  # one record per job: a multi-task SLURM job's others run this too
            return
        hydra_cfg = HydraConfig.get()
        job_dir, metrics = Path(hydra_cfg.runtime.output_dir), Path(hydra_cfg.runtime.output_dir) / "metrics.json"
        result: dict[str, Any] = json.loads(metrics.read_text()) if metrics.exists() else {}
        error = job_error(job_return)  # raised, or a refused job's returned error (litforge.cli.main.run_job)
        # an attempt that saved and requeued its SLURM job: not its end (the requeued attempt writes that)
        status = REQUEUED if requeued_job() is not None else "FAILED" if error else job_return.status.name
        text = None if error is None else f"{type(error).__name__}: {' '.join(str(error).split())}"
        record = {"job": job_dir.name, "overrides": list(job_return.overrides or []), "status": status, "error": text}
        record |= {key: result.get(key, {} if key == "metrics" else None) for key in RESULT_KEYS}
        atomic_write(job_dir / RESULT_FILE, json.dumps(record, indent=2))
        write_summary(Path(hydra_cfg.sweep.dir))
        if job_return.status.name == "FAILED":  # raised (a bug): refused jobs said their line already
            print(f"\nlitforge: sweep job {record['job']} failed: {text}", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        """The summary, the failed jobs and where to look, as the sweep's last lines (each path whole on a line of its
        own); exit code 1 when a job of a grid failed."""
        sweep_dir = Path(config.hydra.sweep.dir)
        records = write_summary(sweep_dir)
        if not records:
            return
        done = sum(r.get("status") == "COMPLETED" for r in records)
        failed = [r for r in records if r.get("status") not in ("COMPLETED", PRUNED, REQUEUED)]
        print(f"\nsweep: {done} of {len(records)} jobs completed; summary, best first:\n{sweep_dir / 'summary.md'}")
        lines = [f"failed: job {r['job']}: {r.get('error') or r['status']}" for r in failed]
        best = records[0].get("best_checkpoint")
        if records[0].get("status") == "COMPLETED" and best and Path(best).exists():
            lines.append(f"best job's checkpoint:\n{best}")
        folders = [f for f in sweep_folders(sweep_dir) if next(f.rglob("events.out.tfevents.*"), None)]
        spec = ",".join(f"{f.parents[1].name}:{f}" for f in folders)  # one folder per task_name: each named
        logdir = f"--logdir {folders[0]}" if len(folders) == 1 else f"--logdir_spec {spec}"
        lines += [f"view the sweep:\ntensorboard {logdir} --host 127.0.0.1"] if folders else []
        print("\n".join(lines)) if lines else None
        if failed and str(config.hydra.sweeper._target_).endswith("BasicSweeper"):  # a search's failed trial: not
            sys.exit(1)  # a failed sweep (Optuna's study records it and goes on); a grid's failed job is, as in Hydra


def sweep_folders(sweep_dir: Path) -> list[Path]:
    """The sweep's folders: its own, and where its jobs set other task names (`-m experiment=a,b`: each experiment's
    jobs write under logs/<its task_name>/multiruns/, in a folder of the same <date>_<time>_<tag>)."""
    split = sweep_dir.parent.name == "multiruns" and len(sweep_dir.parents) > 2  # logs/<task_name>/multiruns/<sweep>
    return sorted(sweep_dir.parents[2].glob(f"*/multiruns/{sweep_dir.name}")) if split else [sweep_dir]


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's record under a sweep's folders (one level or nested), best objective first, failures last."""
    records = [json.loads(p.read_text()) for f in sweep_folders(sweep_dir) for p in sorted(f.rglob(RESULT_FILE))]

    def rank(record: dict[str, Any]) -> tuple[int, float]:
        objective = record.get("objective") or {}
        value = objective.get("value")
        if record.get("status") == PRUNED:
            return (1, 0.0)
        if record.get("status") != "COMPLETED" or value is None:
            return (2, 0.0)
        return (0, -value if objective.get("mode", "max") == "max" else value)

    return sorted(records, key=rank)


def split_overrides(sweep_dir: Path, jobs: list[list[str]]) -> tuple[list[str], list[dict[str, str]]]:
    """(the constants: overrides every job shares, each job's swept keys by their override names: {key: value}).

    A key is swept when the sweep's command line (`sweep.json`) sweeps it or does not name it (a search space in the
    sweeper's config); without that file (an older sweep), when the jobs' values differ."""
    found = [f / SWEEP_FILE for f in sweep_folders(sweep_dir) if (f / SWEEP_FILE).exists()]
    given = json.loads(found[0].read_text()) if found else None
    parse = OverridesParser.create().parse_overrides
    parsed = [[o for line, o in zip(job, parse(job), strict=True) if not line.startswith(PLUMBING)] for job in jobs]
    values = [{o.key_or_group: o.get_value_element_as_str() for o in job} for job in parsed]
    if given is not None:  # as typed (a sweeper writes `false` as `False` in each job's overrides)
        constants = [line for line, o in zip(given, parse(given), strict=True) if not o.is_sweep_override()]
        fixed = {o.key_or_group for o in parse(constants)}
    else:  # one job alone: all of its overrides are its own
        fixed = {k for k, v in values[0].items() if len(values) > 1 and all(job.get(k) == v for job in values)}
        constants = [f"{k}={v}" for k, v in values[0].items() if k in fixed]
    return constants, [{k: v for k, v in job.items() if k not in fixed} for job in values]


def job_sweep_values() -> dict[str, object] | None:
    """In a sweep's job: its swept keys (by their override names: `model`, `optimizer.lr`) with their typed values
    (an option's name for a group); None outside a sweep."""
    if not in_multirun():
        return None
    hydra_cfg, lines = HydraConfig.get(), list(HydraConfig.get().overrides.task)
    swept = split_overrides(Path(hydra_cfg.sweep.dir), [lines])[1][0]
    return {
        o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(lines) if o.key_or_group in swept
    }


def write_summary(sweep_dir: Path) -> list[dict[str, Any]]:
    """summary.csv and summary.md: a column per swept key, the constants said once above the table."""
    records = collect(sweep_dir)
    if not records:
        return records
    constants, swept = split_overrides(sweep_dir, [r["overrides"] for r in records])
    keys = list(dict.fromkeys(k for job in swept for k in job))
    metric_names = sorted({name for r in records for name in r.get("metrics", {})})
    header = ["job", "status", *keys, *metric_names, "error"]
    rows = [
        [
            r["job"],
            r["status"],
            *[values.get(k, "") for k in keys],
            *[_fmt(r.get("metrics", {}).get(m)) for m in metric_names],
            (r.get("error") or "")[:200],
        ]
        for r, values in zip(records, swept, strict=True)
    ]
    said = f"every job: {' '.join(constants)}" if constants else ""
    atomic_write(sweep_dir / "summary.csv", csv_text(header, rows, said))
    objective = next((r["objective"] for r in records if r.get("objective")), None)
    title = (
        f"Sweep summary, best first by {objective['metric']} ({objective['mode']})" if objective else "Sweep summary"
    )
    atomic_write(
        sweep_dir / "summary.md", markdown(title, f"Every job: `{' '.join(constants)}`" * bool(said), header, rows)
    )
    return records


def csv_text(header: list[str], rows: list[list[str]], said_once: str = "") -> str:
    """A CSV table; `said_once` (what every row shares) as a first `#` line: pandas reads it with comment="#"."""
    buffer = io.StringIO(f"# {said_once}\n" * bool(said_once))
    buffer.seek(0, io.SEEK_END)
    csv.writer(buffer).writerows([header, *rows])
    return buffer.getvalue()


def markdown(title: str, said_once: str, header: list[str], rows: list[list[str]]) -> str:
    """A Markdown page: the title, `said_once` (what every row shares) above the table, the table."""
    lines = [f"# {title}", "", *([said_once, ""] if said_once else []), "| " + " | ".join(header) + " |"]
    lines += [
        "|" + "---|" * len(header),
        *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


def mark_pruned(job_dir: Path, last_step: int | None) -> None:
    """Record in a job's result.json that the pruner stopped it (after validation `last_step`, counted from 0)."""
    path = job_dir / RESULT_FILE
    if not path.exists():
        return
    record = json.loads(path.read_text())
    record.update(status=PRUNED, pruned_after_validations=None if last_step is None else last_step + 1)
    atomic_write(path, json.dumps(record, indent=2))


def atomic_write(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(value: object) -> str:
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)
