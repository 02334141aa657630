"""What each job checks before it starts, declared in one place (:data:`JOB_CHECKS`; docs/checks.md), run once.

The command line runs a job's checks before Hydra makes a run folder (litforge.cli.preflight); a job called in code
runs them where it starts (:func:`check_at_start`), skipped for a config this process checked already. Every mistake
is reported, one line each (litforge.core.errors.refuse_each): each check judges values of its own.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from hydra.core.override_parser.types import Override
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing.metadata import check_checkpoint_early
from litforge.checkpointing.resume import check_early
from litforge.config.check import check_config
from litforge.config.relations import PREDICTS
from litforge.config.settings import QUANTIZATIONS, Tune
from litforge.core.contracts import DownloadsData, SteppableTask, missing_members
from litforge.core.errors import ConfigError, LitforgeError, raise_found, refuse_each
from litforge.core.instantiate import to_plain
from litforge.data.tables import check_table_job
from litforge.jobs.build import task_class


@runtime_checkable
class SetsLearningRate(Protocol):
    """A task that takes the lr a finder found (`tune=lr_find` with `tune.apply=true`; litforge.tasks.task has it)."""

    def set_learning_rate(self, lr: float) -> None: ...


ONE_DEVICE = ("strategy=auto trainer.devices=1", "the finders are single-device (Lightning's Tuner)")
_CHECKED: set[str] = set()  # digests of the configs whose job checks passed in this process


def tabular_data(cfg: DictConfig) -> None:
    """data=csv: the file reads, its columns can train, the target's kind fits what the task predicts."""
    check_table_job(cfg.data or {}, PREDICTS.get(str(OmegaConf.select(cfg, "task._target_", default=""))))


def streaming_data(cfg: DictConfig) -> None:
    """data=streaming: the shards' facts file (written by prepare) reads."""
    data: Any = cfg.data or {}
    if str(data.get("_target_", "")).endswith("StreamingImageDataModule") and "://" not in str(data.input_dir):
        from litforge.data.streaming import read_facts  # torch: only for a run that reads shards

        read_facts(str(data.input_dir))


def image_folder(cfg: DictConfig) -> None:
    """data=image_folder: every layout mistake, named with its folder; two classes or more."""
    data: Any = cfg.data or {}
    root = str(data.get("root"))
    if not str(data.get("_target_", "")).endswith("ImageFolderDataModule") or not Path(root).is_dir():
        return
    from litforge.data.folder_layout import FolderLayout  # torch, torchvision: only for data=image_folder

    classes = FolderLayout.scan(root).class_names
    if len(classes) == 1:  # torchmetrics' multiclass metrics would fail inside fit
        raise ConfigError(
            f"data.root={root} has one class folder ({classes[0]}): a classifier needs two or more; add a "
            f"folder per class, e.g. {Path(root) / 'other' / '001.png'}"
        )


def devices_module() -> ModuleType:
    """litforge.runtime.devices, imported where a check must ask torch about the hardware."""
    import litforge.runtime.devices as devices  # torch (~2 s): only for a check that asks torch

    return devices


# where a Linux machine has a GPU torch could use, its driver made one of these (NVIDIA, AMD ROCm, WSL 2)
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpus_here(asked: str) -> tuple[int, str]:
    """The GPUs torch can use as trainer.accelerator=`asked`, and why there are none; without importing torch on a
    Linux machine that has no GPU device file at all."""
    if sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DEVICE_FILES)):
        return 0, "no GPU device in /dev"
    return devices_module().gpu_count(asked), "torch finds none"


def accelerator(cfg: DictConfig) -> None:
    """trainer.accelerator=gpu|cuda|mps where torch has no such device (or fewer than trainer.devices): refused before
    Hydra makes a run folder (Lightning refused it inside the job). A dry run plans for GPUs it does not use."""
    asked, count = OmegaConf.select(cfg, "trainer.accelerator"), OmegaConf.select(cfg, "trainer.devices")
    if asked not in ("gpu", "cuda", "mps") or OmegaConf.select(cfg, "dry_run", default=False):
        return
    found, why = gpus_here(asked)
    if not found:
        raise ConfigError(
            f"trainer.accelerator={asked}: this machine has no GPU that torch can use ({why}): use trainer=cpu, or "
            "trainer.accelerator=auto (a GPU where there is one)"
        )
    if isinstance(count, int) and count > found:
        raise ConfigError(f"trainer.devices={count}: torch finds {found} GPU(s) here: pass trainer.devices={found}")


def ckpt_path(cfg: DictConfig) -> None:
    """ckpt_path=<file> (a new run from it): a readable litforge checkpoint of this run's task and net, torch-free."""
    if cfg.ckpt_path not in (None, "", "last") and not cfg.resume:  # empty: the config check's line says so
        check_early(cfg, str(cfg.ckpt_path))


def float8(cfg: DictConfig) -> None:
    """float8=tensorwise|rowwise where float8 matmuls can run (litforge.models.float8)."""
    if cfg.float8 != "none":
        from litforge.models.float8 import float8_refusal  # imports torch: only for a run that asks for float8

        if (refusal := float8_refusal(str(cfg.float8), cfg.trainer.get("accelerator"))) is not None:
            raise ConfigError(refusal)


def source_datamodule(cfg: DictConfig) -> None:
    """prepare reads a source datamodule; data=streaming reads what prepare writes."""
    if "data" not in cfg or str(cfg.data.get("_target_", "")).endswith("StreamingImageDataModule"):
        raise ConfigError(
            "prepare needs a source datamodule: pass data=digits, mnist, cifar10 or image_folder "
            "(data=streaming reads what prepare writes)"
        )


def export_options(cfg: DictConfig) -> None:
    """export's formats and quantizations, by name (their type, and input_dtype, are typed keys: JobSettings)."""
    if not all(OmegaConf.is_list(cfg[key]) for key in ("formats", "quantize")):
        return  # not a list: the config check's line says so
    formats, quantize = [str(f) for f in cfg.formats], [str(q) for q in cfg.quantize]
    if [f for f in formats if f != "onnx"] or not formats:
        unknown = [f for f in formats if f != "onnx"] or "(none)"
        raise ConfigError(f"formats={formats}: unknown export format {unknown}; supported: onnx (e.g. formats=[onnx])")
    if bad := [q for q in quantize if q not in QUANTIZATIONS]:
        raise ConfigError(
            f"quantize={quantize}: unknown {bad}; choose from {', '.join(QUANTIZATIONS)} (or quantize=[])"
        )


def check_tuning(cfg: DictConfig) -> None:
    """Refuse, in one line and before data or net are built, a `tune=` the finders cannot serve (the command line asks
    it before Hydra resolves the run's folder: the tune group alone is typed here)."""
    tune = Tune.model_validate(to_plain(cfg.tune))
    name = tune.finder
    if name == "none":
        return
    hardware = devices_module()
    task_cls = task_class(cfg)
    if "step_loss" in missing_members(task_cls, SteppableTask):  # the class, before any task is built
        raise ConfigError(
            f"tune={name} steps the task's per-batch loss (`step_loss`, as task=classification and "
            f"task=language_model have); {task_cls.__name__} has none: use tune=none"
        )
    if name == "lr_find" and tune.apply and missing_members(task_cls, SetsLearningRate):
        raise ConfigError(
            f"tune=lr_find with tune.apply=true needs a task that takes the lr it found "
            f"(`set_learning_rate`, as litforge.tasks.task.LitforgeTask has); {task_cls.__name__} has "
            "none: pass tune.apply=false"
        )
    strategy = cfg.strategy
    if "_target_" in strategy or strategy.get("name", "auto") != "auto":
        shown = (
            f"strategy.name={strategy['name']}"
            if "name" in strategy
            else str(strategy.get("_target_")).rsplit(".", 1)[-1]
        )
        raise ConfigError(
            f"tune={name} runs on one device, not with {shown}: {ONE_DEVICE[1]}; tune in a "
            f"one-device run ({ONE_DEVICE[0]}) and pass what it found to this one (optimizer.lr, "
            "data.batch_size; task.lr_scaling=linear scales an lr to the replicas)"
        )
    trainer = cfg.trainer
    devices, nodes = trainer.get("devices", "auto"), trainer.get("num_nodes", 1) or 1
    if hardware.process_count(trainer) > 1:  # devices=auto on a machine with several GPUs: all of them
        raise ConfigError(
            f"tune={name} runs on one device, not trainer.devices={devices} trainer.num_nodes={nodes}: "
            f"{ONE_DEVICE[1]}; tune with trainer.devices=1, then pass what it found to this run"
        )
    if name == "batch_size" and not hardware.runs_on_cuda(trainer.get("accelerator", "auto")):
        raise ConfigError(
            "tune=batch_size finds the largest batch that fits GPU memory; this run is on CPU, where "
            "memory is not what limits the batch: set data.batch_size yourself, or run on a GPU"
        )


# job -> its checks, in order; check_config (every key's type and range, the relations) is every job's; a refusal by a
# torch-free check before it spares the config check its imports of the targets (torch, 4-6 s)
JOB_CHECKS: dict[str, tuple[Callable[[Any], object], ...]] = {
    "train": (ckpt_path, accelerator, check_config, tabular_data, streaming_data, image_folder, float8, check_tuning),
    "eval": (partial(check_checkpoint_early, job="eval"), accelerator, check_config),  # the checkpoint: torch-free
    "predict": (partial(check_checkpoint_early, job="predict"), check_config),
    "export": (partial(check_checkpoint_early, job="export"), check_config, export_options),
    "generate": (partial(check_checkpoint_early, job="generate"), check_config),
    "prepare": (source_datamodule, check_config),
}


def check_job(cfg: DictConfig, job: str, found: list[LitforgeError] | None = None, here: bool = True) -> None:
    """Run `job`'s checks on `cfg`, after the refusals in `found` (the command line's own); raise one error carrying
    every line. The config check imports targets (torch, 4-6 s) only when nothing was refused before it. `here`:
    the job runs on this machine (a SLURM launcher's does not: this machine's GPUs are not judged)."""
    found = [] if found is None else found
    values = lambda: check_config(cfg, imports=not found)  # noqa: E731  judges `found` when it runs
    checks = [check for check in JOB_CHECKS[job] if here or check is not accelerator]
    refuse_each(found, *(values if check is check_config else partial(check, cfg) for check in checks))
    raise_found(found)
    _CHECKED.add(_digest(cfg))


def check_at_start(cfg: DictConfig, job: str) -> None:
    """A job's start: its checks, unless this process passed the same config already (the command line's)."""
    if _digest(cfg) not in _CHECKED:
        check_job(cfg, job)


def _digest(cfg: DictConfig) -> str:
    return hashlib.sha1(OmegaConf.to_yaml(cfg).encode()).hexdigest()


def note_download(cfg: DictConfig | None, job: list[str], sweep: list[Override]) -> None:
    """A sweep's job (override lines `job`) whose dataset must be downloaded and is not there: one line, before the
    sweep's first job starts (litforge.core.contracts.DownloadsData; building the datamodule reads nothing)."""
    target = OmegaConf.select(cfg, "data._target_") if cfg is not None else None
    if cfg is None or not isinstance(target, str) or not issubclass(get_class(target), DownloadsData):
        return
    datamodule = instantiate(cfg.data)
    if isinstance(datamodule, DownloadsData) and (missing := datamodule.missing_download()):
        swept = {o.key_or_group for o in sweep if o.is_sweep_override()}
        which = " ".join(line for line in job if line.lstrip("+~").split("=")[0] in swept)
        print(f"litforge: note: the sweep's job {which}: {missing}", file=sys.stderr)
