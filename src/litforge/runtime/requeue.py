"""Requeue the SLURM job this process runs in (`scontrol requeue <job id>`), once, after a pre-emption save.

Why here and not in a signal handler: the save before it is a collective under DDP, and a collective inside a signal
handler hangs when another rank is inside one of its own (issue 30: Lightning's SIGUSR1 handler hung 5 of 15
deliveries). litforge.callbacks.fault_tolerance.CheckpointOnSignal calls this from global rank 0 after every rank
has saved, at the point the ranks agreed on.

The job id is the scheduler's fact about this process (`SLURM_JOB_ID`; for an array task
`<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>`, as Lightning's own requeue names it), not a setting: outside SLURM
there is nothing to requeue and the run ends with the resume hint instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass


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


def requeue_slurm_job(timeout_s: float = 60) -> Requeue:
    """Run `scontrol requeue <job id>` once; SLURM then ends this job's processes (SIGTERM) and queues it again."""
    job = slurm_job_id()
    if job is None:
        return Requeue(None)
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
    return Requeue(job)
