"""SLURM facts, read from the job's environment and, where it lacks them, from the scheduler (`squeue`).

- :func:`job_id`: the job this process runs in (None outside SLURM);
- :func:`job_run_name`: the run folder every task of one job shares, `slurm-<job id>`, so `srun --ntasks=2 python
  train.py` writes one folder and a requeued job (the same job id) finds its own again (`${run_name:...}` in
  conf/hydra/default.yaml);
- :func:`job_end_time`: when the job's time limit ends (`SLURM_JOB_END_TIME`, which Slurm 22.05 does not set, else
  `squeue -h -j <id> -o %e`), for `time_limit=auto`;
- :func:`gpus_per_node`, :func:`tasks_per_node`, :func:`cpus_per_task`: what `hydra/launcher=slurm` asks for, from
  the trainer's `accelerator` / `devices` and the data's loader workers (resolvers `${slurm_gpus:...}`,
  `${slurm_tasks:...}`, `${slurm_cpus:...}`), so a sweep submits with the default `trainer.devices=auto`.

Torch-free (the CLI composes configs with it); the resolvers are registered by litforge.runtime.ranks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sized
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

FINISHED_MARKER = "metrics.json"  # the same marker as litforge.checkpointing.resume (kept torch- and import-free)
CPU_ACCELERATORS = ("cpu", "mps", "tpu")


def job_id(env: Mapping[str, str] = os.environ) -> str | None:
    """The SLURM job this process runs in; an array task counts as its own job (`<array job>_<task>`)."""
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    value = env.get("SLURM_JOB_ID", "").strip()
    return value or None


def job_run_name(runs_dir: str | Path, default: str, env: Mapping[str, str] = os.environ) -> str:
    """The run folder's name under `runs_dir`: `default` (date, time, a random tag) outside SLURM, `slurm-<job id>`
    inside a job. Every task of the job, and every attempt of a requeued job, gets that same name; only when that
    folder holds a *finished* run (a second `python train.py` in one `salloc`) does the next free `slurm-<id>.<n>`
    follow."""
    job = job_id(env)
    if job is None:
        return str(default)
    name = f"slurm-{job}"
    for n in range(1, 1000):
        if not (Path(str(runs_dir)) / name / FINISHED_MARKER).exists():
            break
        name = f"slurm-{job}.{n}"
    return name


def job_end_time(env: Mapping[str, str] = os.environ) -> float | None:
    """The Unix time the job's time limit ends: `SLURM_JOB_END_TIME` (Slurm >= 23.02 sets it), else what `squeue`
    says (`%e`, the scheduler's local time), else `scontrol show job`; None outside SLURM or for an unlimited job."""
    value = env.get("SLURM_JOB_END_TIME", "").strip()
    if value.isdigit() and int(value) > 0:
        return float(value)
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job:
        return None
    text = _ask(["squeue", "-h", "-j", job, "-o", "%e"])
    if text is None:
        found = re.search(r"\bEndTime=(\S+)", _ask(["scontrol", "show", "job", job]) or "")
        text = found.group(1) if found else None
    return _parse_time(text)


def _ask(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _parse_time(text: str | None) -> float | None:
    """`2026-12-05T17:40:12` (SLURM's local time) as a Unix time; None for `NONE`, `Unknown`, `N/A`, ..."""
    try:
        return datetime.strptime((text or "").splitlines()[0].strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except (ValueError, IndexError):
        return None


def job_is_running(job: str) -> bool | None:
    """Whether SLURM still runs (or has queued) `job`; None when no scheduler answers here."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:  # "Invalid job id specified": the job is gone from the controller
        return False if "Invalid job id" in out.stderr else None
    return out.stdout.strip() not in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


# ---- what hydra/launcher=slurm asks for ------------------------------------------------------------------------------
def local_gpus() -> int:
    """NVIDIA GPUs on this machine, counted without torch (the config is composed before torch is imported)."""
    return len([p for p in Path("/dev").glob("nvidia[0-9]*")])


def _count(devices: object) -> int | None:
    """`trainer.devices` as a count per node: a number, a list of ids; None for auto / -1 (every GPU there is)."""
    if isinstance(devices, Sized) and not isinstance(devices, str):  # a list, a tuple, a ListConfig
        return len(devices)
    text = str(devices).strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    if "," in text:  # "0,1"
        return len([d for d in text.split(",") if d.strip()])
    return None


def gpus_per_node(accelerator: object, devices: object) -> int | None:
    """GPUs to ask for per node, or None (no `--gpus-per-node`, no gres request) for a run on CPUs.

    `accelerator=cpu` never asks; `accelerator=gpu` asks for `devices` (auto: this machine's count, at least 1);
    `accelerator=auto` asks only where the submitting machine has GPUs (set `trainer.accelerator=gpu` to ask for
    GPUs from a login node that has none)."""
    accelerator = str(accelerator).lower()
    if accelerator in CPU_ACCELERATORS:
        return None
    here = local_gpus()
    if accelerator == "auto" and here == 0:
        return None
    return _count(devices) or max(here, 1)


def tasks_per_node(accelerator: object, devices: object) -> int:
    """One task per device: the GPUs asked for, else `devices` on CPUs (auto: 1, as Lightning counts CPUs)."""
    return gpus_per_node(accelerator, devices) or _count(devices) or 1


def cpus_per_task(num_workers: int | str | None) -> int:
    """The loader's workers plus the training process, never more than this machine's CPUs."""
    wanted = int(num_workers or 0) + 1
    return max(1, min(wanted, os.cpu_count() or 1))


def register_resolvers() -> None:
    """`${run_name:<runs folder>,<default name>}`, `${slurm_gpus:...}`, `${slurm_tasks:...}`, `${slurm_cpus:...}`."""
    if not OmegaConf.has_resolver("run_name"):
        # cached: every later resolution (Lightning reads hydra.run.dir again) sees the same name
        OmegaConf.register_new_resolver("run_name", lambda runs, default: job_run_name(runs, default), use_cache=True)
    for name, function in (("slurm_gpus", gpus_per_node), ("slurm_tasks", tasks_per_node)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
    if not OmegaConf.has_resolver("slurm_cpus"):
        OmegaConf.register_new_resolver("slurm_cpus", cpus_per_task)
