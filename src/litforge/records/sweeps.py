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
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from litforge.runtime.compat import job_error
from litforge.runtime.ranks import is_rank_zero
from litforge.runtime.requeue import requeued_job

RESULT_FILE = "result.json"
PRUNED = "PRUNED"  # a job the Optuna sweeper's pruner stopped early: kept, listed after the completed ones
REQUEUED = "REQUEUED"  # a SLURM job saved and requeued at its time limit; its next attempt's record replaces this
# overrides the summary leaves out: plumbing the sweeper adds to each trial (still in each job's overrides.yaml)
PLUMBING_OVERRIDES = ("++callbacks.optuna_pruning=",)


class SweepSummary(Callback):
    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: object) -> None:
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode != RunMode.MULTIRUN:
            return

        if not is_rank_zero():  # one record per job: the other tasks of a multi-task SLURM job run this too
            return
        job_dir = Path(hydra_cfg.runtime.output_dir)
        # an attempt that saved and requeued its SLURM job: not its end (the requeued attempt writes that)
        status = REQUEUED if requeued_job() is not None else job_return.status.name
        record = job_record(job_dir, list(job_return.overrides or []), status, _error_text(job_return))
        atomic_write(job_dir / RESULT_FILE, json.dumps(record, indent=2))
        records = write_summary(Path(hydra_cfg.sweep.dir))
        if record["status"] not in ("COMPLETED", REQUEUED):
            report_failure(record, records, Path(hydra_cfg.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        """The summary, and where it is, as the sweep's last lines (each path whole on a line of its own)."""
        sweep_dir = Path(config.hydra.sweep.dir)
        records = write_summary(sweep_dir) if sweep_dir.is_dir() else []
        if records:
            done = sum(r.get("status") == "COMPLETED" for r in records)
            print(f"\nsweep: {done} of {len(records)} jobs completed; summary, best first:\n{sweep_dir / 'summary.md'}")
            best = records[0].get("best_checkpoint")
            if records[0].get("status") == "COMPLETED" and best and Path(best).exists():
                print(f"best job's checkpoint:\n{best}")


def job_record(job_dir: Path, overrides: list[str], status: str, error: str | None) -> dict[str, Any]:
    metrics_file = job_dir / "metrics.json"
    result: dict[str, Any] = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    return {
        "job": job_dir.name,
        "overrides": overrides,
        "status": status,
        "error": error,
        "objective": result.get("objective"),
        "metrics": result.get("metrics", {}),
        "best_checkpoint": result.get("best_checkpoint"),
    }


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's record under a sweep folder (one level or nested), best objective first, failures last."""
    records = [json.loads(p.read_text()) for p in sorted(sweep_dir.rglob(RESULT_FILE))]

    def rank(record: dict[str, Any]) -> tuple[int, float]:
        objective = record.get("objective") or {}
        value = objective.get("value")
        if record.get("status") == PRUNED:
            return (1, 0.0)
        if record.get("status") != "COMPLETED" or value is None:
            return (2, 0.0)
        return (0, -value if objective.get("mode", "max") == "max" else value)

    return sorted(records, key=rank)


def write_summary(sweep_dir: Path) -> list[dict[str, Any]]:
    records = collect(sweep_dir)
    if not records:
        return records
    metric_names = sorted({name for r in records for name in r.get("metrics", {})})
    header = ["job", "status", "overrides", *metric_names, "error"]
    rows = [
        [
            r["job"],
            r["status"],
            " ".join(o for o in r["overrides"] if not o.startswith(PLUMBING_OVERRIDES)),
            *[_fmt(r.get("metrics", {}).get(m)) for m in metric_names],
            (r.get("error") or "")[:200],
        ]
        for r in records
    ]
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, *rows])
    atomic_write(sweep_dir / "summary.csv", buffer.getvalue())
    objective = next((r["objective"] for r in records if r.get("objective")), None)
    title = (
        f"Sweep summary, best first by {objective['metric']} ({objective['mode']})" if objective else "Sweep summary"
    )
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    atomic_write(sweep_dir / "summary.md", "\n".join(lines) + "\n")
    return records


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


def report_failure(record: dict[str, Any], records: list[dict[str, Any]], sweep_dir: Path) -> None:
    """One clear line per failed job, as it fails. Hydra still ends the sweep with exit code 1 (and the first
    failure's traceback) once every job of the batch has run; the others' results are already recorded."""
    failed = sum(r.get("status") not in ("COMPLETED", PRUNED, REQUEUED) for r in records)
    print(
        f"\nlitforge: sweep job {record['job']} failed ({' '.join(record['overrides'])}): {record['error']}\n"
        f"litforge: {failed} of {len(records)} jobs failed so far; the other jobs go on. Results of every job: "
        f"{sweep_dir / 'summary.md'}",
        file=sys.stderr,
    )


def _fmt(value: object) -> str:
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def _error_text(job_return: JobReturn) -> str | None:
    error = job_error(job_return)
    return None if error is None else f"{type(error).__name__}: {error}"
