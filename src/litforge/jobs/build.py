"""What the jobs build from the composed config: the task, the strategy, the callbacks and the Trainer.

The values were checked once when the job started (litforge.config.check); each builder turns what only the built
objects can reveal into one ConfigError naming the key and the fix (the CLI prints it as one line).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from litforge.config.settings import Train
from litforge.core.contracts import ChecksRun, ChecksTask, net_of
from litforge.core.errors import ConfigError
from litforge.core.instantiate import instantiate_group, to_plain, unexpected_argument, unknown_argument

log = logging.getLogger(__name__)


def task_class(cfg: DictConfig) -> type:
    """The LightningModule class `task._target_` names (before building it: its `data_kind` is checked first)."""
    target = cfg.task._target_
    try:
        return get_class(target)
    except Exception:
        raise ConfigError(f"task._target_={target!r} cannot be imported; see conf/task/ for the options") from None


def build_task(cfg: DictConfig, shape: Mapping[str, Any]) -> Any:
    """The task's LightningModule, given plain-data configs for everything it builds itself."""
    task_cfg = to_plain(cfg.task)
    target = task_cfg.pop("_target_")
    task_cls = task_class(cfg)
    extra = {"loss": to_plain(cfg.loss)} if "loss" in cfg and cfg.loss else {}
    try:
        return task_cls(
            net=to_plain(cfg.model),
            optimizer=to_plain(cfg.optimizer),
            scheduler=to_plain(cfg.scheduler) or None,
            **extra,
            **shape,
            **task_cfg,
            run_config=to_plain(cfg),
        )
    except TypeError as exc:
        key = unexpected_argument(exc)
        if key is not None and key in task_cfg:
            raise unknown_argument("task", key, target) from None
        if key in ("num_classes", "num_targets") and key in shape:  # the data's target read as the other kind
            read, fix = ("classes", "task=classification") if key == "num_classes" else ("numbers", "task=regression")
            raise ConfigError(
                f"task._target_={target} does not take {key}: the data's target is read as {read}; pass {fix}, or "
                "(data=csv) data.target_kind=class or value to read it as the task predicts"
            ) from None
        raise ConfigError(f"could not build the task {target}: {exc}") from None


def build_training_task(cfg: DictConfig, shape: Mapping[str, Any], settings: Train) -> Any:
    """The task as training needs it: its net on the meta device where a sharded strategy fills it later, activation
    checkpointing wrapped in before any sharding (FSDP2's hooks then see the wrapped blocks), then compile and
    channels_last (litforge.models.speed), as the run's typed `settings` ask."""
    from litforge.models.speed import apply_speed_options
    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing
    from litforge.parallel.meta_init import meta_nets, wants_meta_init

    with meta_nets(wants_meta_init(cfg.strategy)):
        task = build_task(cfg, shape)
    apply_float8(task, settings.float8, cfg.strategy, cfg.trainer.get("accelerator"))
    apply_activation_checkpointing(task, settings.activation_checkpointing)
    apply_speed_options(task, compile=settings.compile, channels_last=settings.channels_last)
    return task


def apply_float8(task: Any, recipe: str, strategy_cfg: Any, accelerator: Any) -> None:
    """`float8=tensorwise|rowwise` (litforge.models.float8; refused where it cannot run by train's checks, jobs.checks):
    the task's net converted, before activation checkpointing, sharding and compile; float8 all-gather under FSDP2."""
    if recipe == "none":
        return
    from torch import nn

    from litforge.models.float8 import convert_to_float8

    net = net_of(task)
    if not isinstance(net, nn.Module):
        raise ConfigError(f"float8 converts the task's `net`, and {type(task).__name__} has none: pass float8=none")
    convert_to_float8(net, recipe, fsdp_all_gather=shards_data(strategy_cfg))


def shards_data(strategy_cfg: Any) -> bool:
    """Whether the `strategy=` config shards parameters over data-parallel ranks with FSDP2 (fsdp, fsdp_tp, hsdp)."""
    target = str((strategy_cfg or {}).get("_target_", "")) if hasattr(strategy_cfg, "get") else ""
    return target.endswith("strategies.ModelParallel") and strategy_cfg.get("data_parallel_size", "auto") != 1


def training_callbacks(
    configured: list[Any],
    trainer_kwargs: dict[str, Any],
    loggers: list[Any],
    record: dict[str, Any],
    settings: Train,
    checkpoint_dir: Any,
) -> list[Any]:
    """Every callback a training run gets, in one place: the `callbacks` group as configured (less what a trainer
    switch turned off), the clock's `checkpoint_every` / `time_limit` saves, and the provenance recorder (every
    checkpoint names the commit that trained it; eval.py reports it)."""
    from litforge.callbacks.provenance import ProvenanceRecorder
    from litforge.callbacks.time_limit import clock_callbacks

    callbacks = respect_trainer_switches(configured, trainer_kwargs, loggers)
    callbacks += clock_callbacks(settings.checkpoint_every, settings.time_limit, checkpoint_dir)
    callbacks.append(ProvenanceRecorder(record))
    return callbacks


def build_fit_trainer(
    trainer_kwargs: dict[str, Any],
    strategy: Any,
    task: Any,
    datamodule: Any,
    callbacks: list[Any],
    loggers: list[Any],
    settings: Train,
) -> Any:
    """The Trainer that fits `task`: the strategy's own refusals first (they need the built net and callbacks, and
    run once, before any rank starts), async checkpoint saves, N steps per call, then torchrun's fresh rendezvous."""
    from litforge.checkpointing.io import with_async_saves
    from litforge.loops import steps_per_call as steps
    from litforge.parallel.elastic import init_elastic_process_group

    if isinstance(strategy, ChecksTask):
        strategy.check_task(task)  # hogwild: BatchNorm
    if isinstance(strategy, ChecksRun):
        strategy.check_run(datamodule, trainer_kwargs, callbacks)  # pipeline: batch size, clipping; its callbacks
    if settings.checkpoint_async:  # checkpoint writes in a background thread, still atomic
        trainer_kwargs["plugins"] = with_async_saves(trainer_kwargs.get("plugins"), strategy)
    strategy = steps.install(settings.steps_per_call, task, datamodule, trainer_kwargs, strategy, callbacks)
    trainer = build_trainer(trainer_kwargs, strategy=strategy, callbacks=callbacks, logger=loggers or False)
    init_elastic_process_group(trainer.strategy)  # torchrun: a fresh rendezvous on every restart (parallel/elastic.py)
    return trainer


def build_strategy(node: Any, trainer_kwargs: dict[str, Any] | None = None) -> Any:
    """`strategy` is either a name Lightning knows (`{name: auto}`) or an instantiable strategy config.

    A mesh size left `auto` (`strategy=fsdp|tp|fsdp_tp|hsdp`) is given explicitly here, from the process count the
    trainer config asks for: Lightning's ModelParallelStrategy reads `data_parallel_size: auto` as "the number of
    nodes", so `strategy=fsdp trainer.devices=2` on one machine would otherwise shard over one rank.
    """
    if node is None:
        return "auto"
    if "_target_" in node:
        from litforge.parallel.strategies import explicit_mesh_sizes

        sizes = explicit_mesh_sizes(node, process_count(trainer_kwargs or {}))
        return instantiate_group("strategy", OmegaConf.merge(node, sizes) if sizes else node)
    return node.get("name", "auto")


def process_count(trainer_kwargs: dict[str, Any]) -> int:
    """The processes a Trainer built from `trainer_kwargs` runs (devices per node x nodes), as Lightning counts
    them: `devices=auto` (or -1) is every GPU where the accelerator may be one and CUDA is there, else 1."""
    devices, nodes = trainer_kwargs.get("devices", "auto"), int(trainer_kwargs.get("num_nodes", 1) or 1)
    if isinstance(devices, (list, tuple)) or (hasattr(devices, "__len__") and not isinstance(devices, str)):
        per_node = len(devices)
    elif isinstance(devices, str) and "," in devices:  # device indices: "0,1"
        per_node = len([d for d in devices.split(",") if d.strip()])
    elif str(devices).lstrip("-").isdigit() and int(devices) > 0:
        per_node = int(devices)
    else:  # auto, -1
        import torch

        accelerator = str(trainer_kwargs.get("accelerator", "auto"))
        gpus = torch.cuda.device_count() if accelerator in ("auto", "gpu", "cuda") else 0
        per_node = max(1, gpus)
    return per_node * nodes


def build_trainer(trainer_kwargs: dict[str, Any], **kwargs: Any) -> Any:
    """`pl.Trainer(...)`, with hardware and argument mistakes reported as one actionable line."""
    import pytorch_lightning as pl
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    check_cpu_processes(trainer_kwargs)
    if "deterministic" in trainer_kwargs:
        trainer_kwargs = {
            **trainer_kwargs,
            "deterministic": deterministic_mode(
                trainer_kwargs["deterministic"], trainer_kwargs.get("accelerator", "auto")
            ),
        }
    try:
        trainer = pl.Trainer(**trainer_kwargs, **kwargs)
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
    if trainer_kwargs.get("sync_batchnorm") and trainer.accelerator.__class__.__name__ == "CPUAccelerator":
        # torch's SyncBatchNorm refuses CPU modules, deep inside DDP's constructor
        raise ConfigError(
            "trainer.sync_batchnorm=true needs GPUs (torch's SyncBatchNorm does not run on CPU): drop it for CPU runs"
        )
    return trainer


def runs_on_cuda(accelerator: Any) -> bool:
    """Whether a `trainer.accelerator` setting trains on CUDA on this machine (decided before the Trainer exists,
    for switches that must be set before it: deterministic kernels, TF32 matmuls)."""
    import torch

    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def deterministic_mode(deterministic: Any, accelerator: Any) -> Any:
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


def check_cpu_processes(trainer_kwargs: dict[str, Any], per_core: int = 4) -> None:
    """On CPU each of `trainer.devices` is a training process; Lightning starts as many as asked, so a typo
    (devices=100) would fork a hundred copies of the run. Allow up to `per_core` per core (oversubscribing is fine for
    testing distributed code on a laptop). GPU/TPU counts are checked by Lightning against the devices present."""
    import os

    import torch

    devices, accelerator = trainer_kwargs.get("devices"), trainer_kwargs.get("accelerator", "auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    cores = os.cpu_count() or 1
    if on_cpu and isinstance(devices, int) and not isinstance(devices, bool) and devices > per_core * cores:
        raise ConfigError(
            f"trainer.devices={devices} would start {devices} training processes on this machine's "
            f"{cores} CPU cores; use at most trainer.devices={per_core * cores} (or trainer.devices=1)"
        )


def respect_trainer_switches(callbacks: list[Any], trainer_kwargs: dict[str, Any], loggers: list[Any]) -> list[Any]:
    """Switching something off (progress bar, model summary, logger) wins over the callbacks group, not clashes."""
    from pytorch_lightning.callbacks import LearningRateMonitor, ModelSummary, ProgressBar

    drop: tuple[type, ...] = () if loggers else (LearningRateMonitor,)
    if trainer_kwargs.get("enable_progress_bar") is False:
        drop += (ProgressBar,)
    if trainer_kwargs.get("enable_model_summary") is False:
        drop += (ModelSummary,)
    return [cb for cb in callbacks if not (drop and isinstance(cb, drop))]


def too_few_batches(exc: BaseException) -> ConfigError | None:
    """Lightning's refusal of a `limit_*_batches` fraction that leaves a loader no batch, as one line naming the
    loader's size and the smallest fraction that gives one batch (None for any other exception).

    Only the built loaders know their length (a user's datamodule's too), so it is asked where Lightning asks it, in
    fit/test, and the numbers are read from Lightning's message (pytorch_lightning's `_parse_num_batches`).
    """
    import math
    import re

    found = re.search(r"check (\S+) of the `(\w+)_dataloader` but \S+ \* (\d+) < 1", str(exc))
    if type(exc).__name__ != "MisconfigurationException" or found is None:
        return None
    limit, stage, batches = found[1], found[2], int(found[3])
    key, digits = f"trainer.limit_{stage}_batches", 1 - math.floor(math.log10(1 / batches))
    least = min(math.ceil(10**digits / batches) / 10**digits, 1.0)  # 1/batches, rounded up to two digits
    data = {"train": "training", "val": "validation"}.get(stage, stage)
    return ConfigError(
        f"{key}={limit}: the {data} data is {batches} batch{'es' if batches > 1 else ''}, so {limit} of it is 0 "
        f"batches; pass a fraction >= {least:g} or a count of batches, e.g. {key}={least:g}"
    )
