"""What the trainer's `accelerator` and `devices` settings mean on this machine (decided before the Trainer exists),
the CPU threads each process uses (:func:`apply_threads`), and the Trainer every job builds from them
(:func:`build_trainer`). Imports torch: the `tune=` checks and the command line's job runner import it on use.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.exceptions import MisconfigurationException
from pytorch_lightning.accelerators import CPUAccelerator

from litforge.core.errors import ConfigError
from litforge.core.instantiate import unexpected_argument, unknown_argument

if TYPE_CHECKING:
    from pytorch_lightning.callbacks import Callback
    from pytorch_lightning.loggers import Logger
    from pytorch_lightning.strategies import Strategy

log = logging.getLogger(__name__)


def runs_on_cuda(accelerator: object) -> bool:
    """Whether a `trainer.accelerator` setting trains on CUDA on this machine (decided before the Trainer exists,
    for switches that must be set before it: deterministic kernels, TF32 matmuls)."""
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def gpu_count(accelerator: str) -> int:
    """The GPUs torch can use as `trainer.accelerator` (gpu: CUDA's, else Apple's MPS as one; cuda; mps)."""
    if accelerator != "mps" and torch.cuda.is_available():
        return torch.cuda.device_count()
    return int(accelerator != "cuda" and torch.backends.mps.is_available())


def process_count(trainer_kwargs: Mapping[str, Any]) -> int:
    """The processes a Trainer built from `trainer_kwargs` runs (devices per node x nodes), as Lightning counts
    them: `devices=auto` (or -1) is every GPU where the accelerator may be one and CUDA is there, else 1."""
    devices, nodes = trainer_kwargs.get("devices", "auto"), int(trainer_kwargs.get("num_nodes", 1) or 1)
    if isinstance(devices, Sized) and not isinstance(devices, str):  # device indices: [0, 1]
        per_node = len(devices)
    elif isinstance(devices, str) and "," in devices:  # device indices: "0,1"
        per_node = len([d for d in devices.split(",") if d.strip()])
    elif str(devices).lstrip("-").isdigit() and int(devices) > 0:
        per_node = int(devices)
    else:  # auto, -1
        accelerator = str(trainer_kwargs.get("accelerator", "auto"))
        per_node = max(1, torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0)
    return per_node * nodes


def apply_matmul_precision(precision: str | None, accelerator: object = "auto") -> str | None:
    """`torch.set_float32_matmul_precision` for CUDA runs only; returns what float32 matmuls now use (None on CPU).

    "high" lets float32 matmuls and convolutions use TF32 tensor cores (Ampere and newer; an A100's dense TF32 peak is
    8x its fp32 one) at a 10-bit mantissa, PyTorch's and Lightning's advice for training (Lightning warns on every
    CUDA run that leaves it at "highest").
    It is a process-wide switch that no config shows, hence the provenance record.
    A CPU run leaves torch's default alone, so CPU results stay exact fp32 and comparable across machines.
    """
    if precision is None or not runs_on_cuda(accelerator):
        return None
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = precision != "highest"
    return torch.get_float32_matmul_precision()


def deterministic_mode(deterministic: object, accelerator: object) -> object:
    """`trainer.deterministic=true` on CUDA becomes Lightning's "warn" (`torch.use_deterministic_algorithms(True,
    warn_only=True)`): CUDA has no deterministic kernel for some ops every CNN here uses (the backward of adaptive
    average pooling), so strict mode failed at the first backward. Every op that has a deterministic kernel still
    uses it; the others warn. On CPU every op is deterministic, and `true` stays strict."""
    if deterministic is True and runs_on_cuda(accelerator):
        log.warning(
            "trainer.deterministic=true on CUDA: ops without a deterministic CUDA kernel (adaptive average "
            "pooling's backward) warn instead of failing (trainer.deterministic=warn)"
        )
        return "warn"
    return deterministic


def usable_cores(affinity: int, cpu_max: str | None = None, cfs: tuple[str, str] | None = None) -> int:
    """The cores a process may use: the CPUs of its affinity mask (`os.sched_getaffinity`), capped by its cgroup's
    CPU quota, rounded down (a quota of 1.5 cores throttles a second busy thread), at least 1. The quota is cgroup v2's
    `cpu.max` text ("<quota> <period>", "max <period>": none) or v1's (`cpu.cfs_quota_us`, `cpu.cfs_period_us`)
    texts (quota -1: none). torch's own default is every core of the machine, whatever the mask or the container's
    quota. A pure function of the files' texts: the tests pass faked ones, since setting a cgroup quota takes root
    control of the cgroup tree, which a test here does not have."""
    quota, period = (cpu_max.split() + [""])[:2] if cpu_max else cfs or ("", "")
    quota, period = quota.strip(), period.strip()
    cap = int(quota) // int(period) if quota.isdigit() and period.isdigit() and int(period) else affinity  # max, -1
    return max(1, min(affinity, cap))


def idle_cores(cpus: set[int], before: str, after: str) -> float:
    """How many of `cpus` sat idle between two readings of /proc/stat (idle + iowait time over all time, per CPU)."""
    ticks = [
        {
            int(r[0][3:]): (int(r[4]) + int(r[5]), sum(map(int, r[1:9])))
            for r in map(str.split, text.splitlines())
            if r and r[0][:3] == "cpu" and r[0][3:].isdigit()
        }
        for text in (before, after)
    ]
    spans = [(e[0] - b[0], e[1] - b[1]) for c in cpus if (b := ticks[0].get(c)) and (e := ticks[1].get(c))]
    return sum(idle / total for idle, total in spans if total > 0) if any(t for _, t in spans) else float(len(cpus))


def choose_threads(
    setting: int | str, omp: str | None, cores: int, idle: float | None, local_ranks: int
) -> tuple[int, str]:
    """Threads per process and why: `threads=N` as given; else OMP_NUM_THREADS where set; else the usable cores less
    those busy with other work when the run starts (`idle`: None where not measured), shared among the local ranks.
    A core counts as free when it is at least 70 % idle: OpenMP splits each op evenly among its threads and waits
    for the slowest, so a thread on a core another process holds slows every op (a busy 2-core machine made an epoch
    11x slower with 2 threads than with 1)."""
    if setting != "auto":
        return int(setting), f"threads={setting}"
    if omp and omp.isdigit() and int(omp) > 0:
        return int(omp), f"OMP_NUM_THREADS={omp}"
    free = cores if idle is None else max(1, min(cores, math.floor(idle + 0.3)))
    busy = f", {cores - free} busy with other work" if free < cores else ""
    ranks = f" shared by {local_ranks} local ranks" if local_ranks > 1 else ""
    return max(1, free // max(1, local_ranks)), f"auto: {cores} usable cores{busy}{ranks}"


def apply_threads(setting: int | str, trainer_kwargs: Mapping[str, Any]) -> str:
    """Size torch's intra-op and inter-op thread pools for this process (`threads=auto|N`) before any parallel work,
    and return the start line's note. Auto: :func:`usable_cores` from the affinity mask and the cgroup quota, less
    the cores other processes keep busy (measured over 0.1 s, by the first local rank only: the others start while it
    works), divided among the local ranks (LOCAL_WORLD_SIZE, else the trainer's devices per node). DataLoader workers
    take one thread each (torch sets it in every worker)."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # macOS, Windows: no affinity masks
        cpus = set(range(os.cpu_count() or 1))

    def read(path: str) -> str | None:
        return Path(path).read_text() if Path(path).is_file() else None

    quota, period = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    cores = usable_cores(len(cpus), read("/sys/fs/cgroup/cpu.max"), (quota, period) if quota and period else None)
    before, idle = read("/proc/stat"), None
    if setting == "auto" and before and os.environ.get("LOCAL_RANK", "0") == "0":
        time.sleep(0.1)
        idle = idle_cores(cpus, before, read("/proc/stat") or before)
    nodes = int(trainer_kwargs.get("num_nodes", 1) or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or process_count(trainer_kwargs) // nodes)
    threads, why = choose_threads(setting, os.environ.get("OMP_NUM_THREADS"), cores, idle, local)
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # allowed once per process, before inter-op work: a sweep's later jobs
        torch.set_num_interop_threads(threads)
    return f"threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op ({why})"


def check_cpu_processes(trainer_kwargs: Mapping[str, Any], per_core: int = 4) -> None:
    """On CPU each of `trainer.devices` is a training process; Lightning starts as many as asked, so a typo
    (devices=100) would fork a hundred copies of the run. Allow up to `per_core` per core (oversubscribing is fine for
    testing distributed code on a laptop). GPU/TPU counts are checked by Lightning against the devices present."""
    devices, accelerator = trainer_kwargs.get("devices"), trainer_kwargs.get("accelerator", "auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not runs_on_cuda(accelerator))
    cores = os.cpu_count() or 1
    if on_cpu and isinstance(devices, int) and not isinstance(devices, bool) and devices > per_core * cores:
        raise ConfigError(
            f"trainer.devices={devices} would start {devices} training processes on this machine's "
            f"{cores} CPU cores; use at most trainer.devices={per_core * cores} (or trainer.devices=1)"
        )


def build_trainer(
    trainer_kwargs: Mapping[str, Any],
    *,
    strategy: str | Strategy = "auto",
    callbacks: list[Callback] | None = None,
    logger: Logger | list[Logger] | bool | None = None,
) -> pl.Trainer:
    """`pl.Trainer(...)` from the `trainer` group's keyword arguments and the job's own (Lightning's defaults where
    left out), with hardware and argument mistakes reported as one actionable line."""
    check_cpu_processes(trainer_kwargs)
    accelerator, deterministic = trainer_kwargs.get("accelerator", "auto"), trainer_kwargs.get("deterministic")
    trainer_kwargs = {**trainer_kwargs, "deterministic": deterministic_mode(deterministic, accelerator)}
    if trainer_kwargs.get("sync_batchnorm") == "auto":  # trainer=ddp: synced on CUDA, off on CPU (gloo processes)
        trainer_kwargs["sync_batchnorm"] = runs_on_cuda(accelerator)
    try:
        trainer = pl.Trainer(**trainer_kwargs, strategy=strategy, callbacks=callbacks, logger=logger)
    except MisconfigurationException as exc:
        raise ConfigError(
            f"the trainer cannot run on this machine as configured: {exc} "
            "(use trainer=cpu, or trainer.accelerator=auto and trainer.devices=auto)"
        ) from None
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"the configured trainer needs a package that is not installed: {exc}. On a machine "
            "without that hardware, use trainer=cpu or trainer.accelerator=auto"
        ) from None
    except (TypeError, ValueError) as exc:
        key = unexpected_argument(exc)
        if key is not None and key in trainer_kwargs:
            raise unknown_argument("trainer", key, "pytorch_lightning.Trainer") from None
        raise ConfigError(f"invalid trainer settings: {exc}") from None
    if trainer_kwargs.get("sync_batchnorm") and isinstance(trainer.accelerator, CPUAccelerator):
        # torch's SyncBatchNorm refuses CPU modules, deep inside DDP's constructor
        raise ConfigError(
            "trainer.sync_batchnorm=true needs GPUs (torch's SyncBatchNorm does not run on CPU): drop it for CPU runs"
        )
    return trainer
