"""Requeue the SLURM job this process runs in (`scontrol requeue <job id>`), once, after a pre-emption save.

Why here and not in a signal handler: the save before it is a collective under DDP, and a collective inside a signal
handler hangs when another rank is inside one of its own (issue 30: Lightning's SIGUSR1 handler hung 5 of 15
deliveries). litforge.callbacks.fault_tolerance.CheckpointOnSignal calls this from global rank 0 after every rank
has saved, at the point the ranks agreed on.

Before `scontrol requeue`, :func:`announce` writes the line that says why the job comes back and from where (signal,
step, checkpoint, job id) and flushes it: slurmstepd ends the job's step as soon as the requeue lands ("CANCELLED ...
DUE TO JOB REQUEUE"), so anything written after it may never reach `slurm-<id>.out`.

The process remembers the job it requeued (:func:`requeued_job`): under `hydra/launcher=slurm` the attempt that
requeued itself has no result to give its sweep (hydra_plugins.litforge_slurm.launcher), the attempt after it does.

The job id is the scheduler's fact about this process (`SLURM_JOB_ID`; for an array task
`<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>`, as Lightning's own requeue names it), not a setting: outside SLURM
there is nothing to requeue and the run ends with the resume hint instead.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)
_requeued: list[str] = []  # the job this process requeued (at most one entry)
_early: list[int] = []  # a pre-emption signal that came before training started (catch_early)


@dataclass(frozen=True)
class Requeue:
    """What a requeue attempt did: the job id (None outside SLURM) and, if it failed, why."""

    job_id: str | None
    problem: str = ""

    @property
    def done(self) -> bool:
        return self.job_id is not None and not self.problem


def slurm_job_id(env: Mapping[str, str] | None = None) -> str | None:
    """The id `scontrol requeue` takes for this process's job; None outside SLURM."""
    env = os.environ if env is None else env
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    job = f"{array_job}_{array_task}" if array_job and array_task else env.get("SLURM_JOB_ID")
    return job if job and re.fullmatch(r"[0-9_]+", job) else None


def requeued_job() -> str | None:
    """The SLURM job this process requeued (`scontrol requeue` succeeded), None when it requeued none."""
    return _requeued[-1] if _requeued else None


def forget_requeue() -> None:
    """Start a new job in this process with nothing requeued (the sweep launcher calls it before each job)."""
    _requeued.clear()


def catch_early(signal_name: str | None) -> None:
    """Inside a SLURM job, note the pre-emption signal (`SIGUSR1`) from now until training installs its own handler.

    Its default action ends the process: a `--signal=USR1@<s>` that comes while the job still imports, builds its
    model or reads its data would kill it with nothing saved (slurmctld sends it up to a minute before the time it
    was asked for). Noted here, the on-signal callback acts on it as soon as training starts
    (:func:`take_early_signal`): it stops at the first agreed step and requeues."""
    if not signal_name or slurm_job_id() is None or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.Signals[signal_name], lambda signum, _frame: _early.append(signum))


def ignore_from_now(signal_name: str | None) -> None:
    """Inside a SLURM job, ignore the pre-emption signal once training has ended (tests, summaries, exit follow).

    Nothing is left to save, and a Python handler would not survive the interpreter's shutdown: CPython puts the
    default action back for every signal with a Python handler as it exits (`_PySignal_Fini`), so a `--signal=USR1`
    landing in those last moments killed a job that had finished (seen: `tasks 0-1: User defined signal 1`, job
    FAILED). An ignored signal stays ignored to the end."""
    if not signal_name or slurm_job_id() is None or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.Signals[signal_name], signal.SIG_IGN)


def take_early_signal() -> bool:
    """Whether the pre-emption signal came before training started (and forget it)."""
    came = bool(_early)
    _early.clear()
    return came


def announce(line: str) -> None:
    """Write `line` to stderr (the job's `slurm-<id>.out`) and to the run's log file, both flushed, before the
    requeue (through the log file's handler alone: the console handler would print it twice)."""
    print(line, file=sys.stderr, flush=True)
    record = log.makeRecord(log.name, logging.WARNING, __file__, 0, line, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
            handler.flush()


def requeue_slurm_job(timeout_s: float = 60, say: str = "") -> Requeue:
    """Run `scontrol requeue <job id>` once; SLURM then ends this job's processes (SIGTERM) and queues it again.

    `say`: why and from where (signal, step, checkpoint); written and flushed with the job id before the requeue."""
    job = slurm_job_id()
    if job is None:
        return Requeue(None)
    if say:
        announce(f"litforge: {say}; requeueing SLURM job {job} (scontrol requeue): it continues from that checkpoint")
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return Requeue(job, "scontrol is not on PATH")
    try:
        result = subprocess.run(
            [scontrol, "requeue", job], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Requeue(job, f"scontrol requeue {job}: {error}")
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Requeue(job, f"scontrol requeue {job} exited {result.returncode}" + (f": {said[-1]}" if said else ""))
    _requeued[:] = [job]
    return Requeue(job)
