"""The Trainer a training run fits with: its strategy built from `strategy=`, the strategy's refusals, async saves,
N steps per call, torchrun's fresh rendezvous."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger
from pytorch_lightning.strategies import Strategy

from litforge.checkpointing.io import with_async_saves
from litforge.config.settings import Train
from litforge.core.contracts import ChecksRun, ChecksTask
from litforge.core.instantiate import instantiate_group
from litforge.loops import steps_per_call
from litforge.parallel.elastic import init_elastic_process_group
from litforge.parallel.strategies import explicit_mesh_sizes
from litforge.runtime.devices import build_trainer, process_count


def build_strategy(node: DictConfig | None, trainer_kwargs: Mapping[str, Any] | None = None) -> str | Strategy:
    """`strategy`: a name Lightning knows (`{name: auto}`) or an instantiable strategy config. A mesh size left `auto`
    (`strategy=fsdp|tp|fsdp_tp|hsdp`) is made explicit from the trainer's process count: Lightning reads
    `data_parallel_size: auto` as "the number of nodes" (`trainer.devices=2` on one machine: one rank)."""
    if node is None:
        return "auto"
    if "_target_" in node:
        sizes = explicit_mesh_sizes(node, process_count(trainer_kwargs or {}))
        return instantiate_group("strategy", OmegaConf.merge(node, sizes) if sizes else node)
    return str(node.get("name", "auto"))


def shards_data(strategy_cfg: Mapping[str, Any] | None) -> bool:
    """Whether the `strategy=` config shards parameters over data-parallel ranks with FSDP2 (fsdp, fsdp_tp, hsdp)."""
    if strategy_cfg is None:
        return False
    target = str(strategy_cfg.get("_target_", ""))
    return target.endswith("strategies.ModelParallel") and strategy_cfg.get("data_parallel_size", "auto") != 1


def build_fit_trainer(
    trainer_kwargs: dict[str, Any],
    strategy: str | Strategy,
    task: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    callbacks: list[Callback],
    loggers: list[Logger],
    settings: Train,
) -> pl.Trainer:
    """The Trainer that fits `task`: the strategy's own refusals first (they need the built net and callbacks, and
    run once, before any rank starts), async checkpoint saves, N steps per call, then torchrun's fresh rendezvous."""
    if isinstance(strategy, ChecksTask):
        strategy.check_task(task)  # hogwild: BatchNorm
    if isinstance(strategy, ChecksRun):
        strategy.check_run(datamodule, trainer_kwargs, callbacks)  # pipeline: batch size, clipping; its callbacks
    if settings.checkpoint_async:  # checkpoint writes in a background thread, still atomic
        trainer_kwargs["plugins"] = with_async_saves(trainer_kwargs.get("plugins"), strategy)
    strategy = steps_per_call.install(settings.steps_per_call, task, datamodule, trainer_kwargs, strategy, callbacks)
    trainer = build_trainer(trainer_kwargs, strategy=strategy, callbacks=callbacks, logger=loggers or False)
    init_elastic_process_group(trainer.strategy)  # torchrun: a fresh rendezvous on every restart (parallel/elastic.py)
    return trainer
