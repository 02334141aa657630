"""Rebuilding a trained task (and its data) from a checkpoint alone: what eval, predict, export and generate share.

A litforge checkpoint records the task class, its plain-data hyperparameters and the whole run config
(`CHECKPOINT_KEY`), so nothing but the file is needed. Everything a checkpoint asks to build is checked first
(`litforge.checkpointing.load.check_trusted_targets`): a file is data, never code.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from litforge.checkpointing.load import (
    check_trusted_targets,
    check_trusted_task_class,
    load_checkpoint,
    recorded_data_config,
    recorded_task_class,
    trusted_prefixes,
)
from litforge.core.contracts import DataModule
from litforge.core.errors import CheckpointError, ConfigError
from litforge.core.instantiate import instantiate_group, to_plain
from litforge.tasks.task import LitforgeTask


def task_class_from_checkpoint(
    checkpoint: dict[str, Any], path: str, trusted: tuple[str, ...] = ()
) -> type[LitforgeTask]:
    """The task class recorded in a checkpoint: a LitforgeTask of litforge's tasks or of a package in `trusted`
    (`trusted_packages`); a file is data, so it never picks other code to import."""
    recorded = recorded_task_class(checkpoint, path)
    check_trusted_task_class(recorded, path, trusted)
    module_name, _, class_name = recorded.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, LitforgeTask)):
        raise CheckpointError(f"{path} names task class {recorded!r}, which is not a LitforgeTask subclass")
    return cls


def restore_task(checkpoint: dict[str, Any], path: str, trusted_packages: Iterable[str] | None = ()) -> LitforgeTask:
    """Rebuild the task a checkpoint was trained as, from its plain-data hparams, and load its weights; classes of
    `trusted_packages` (the user's own, named by that config key) are built besides litforge's."""
    trusted = trusted_prefixes(trusted_packages)
    cls = task_class_from_checkpoint(checkpoint, path, trusted)
    hparams = dict(checkpoint.get("hyper_parameters", {}))
    check_trusted_targets(hparams, path, "task", trusted)  # the task builds its net and loss from these
    try:
        task = cls(**hparams)
    except TypeError as exc:
        raise CheckpointError(f"{path} does not match this version of {cls.__name__}: {exc}") from None
    task.on_load_checkpoint(checkpoint)
    missing, unexpected = task.load_state_dict(checkpoint["state_dict"], strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit {cls.__name__} (missing: {missing[:3]}, unexpected: "
            f"{unexpected[:3]}); was it written by another version of the model?"
        )
    return task.eval()


def inference_device(name: str = "auto") -> torch.device:
    """The device predict/generate run on: `auto` = the GPU when there is one (cuda:0), else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but this machine has no CUDA GPU: pass device=auto or device=cpu")
    return device


def load_for_inference(cfg: DictConfig, checkpoint: dict[str, Any] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(task, datamodule, checkpoint) from `cfg.ckpt_path`; the data config comes from the checkpoint unless given.

    `checkpoint`: the already loaded (and possibly normalised, see litforge.deploy.net) contents of `cfg.ckpt_path`.
    Public (`litforge.load_for_inference`): a notebook's config may hold `ckpt_path` alone; the jobs' configs hold
    `trusted_packages` and `data` too (data: null = the checkpoint's own).
    """
    path = str(cfg.ckpt_path)
    checkpoint = checkpoint if checkpoint is not None else load_checkpoint(path)
    trusted = cfg.trusted_packages if "trusted_packages" in cfg else ()
    data = cfg.data if "data" in cfg else None
    task = restore_task(checkpoint, path, trusted)
    data_cfg = to_plain(data) if data else recorded_data_config(checkpoint, path, trusted)
    datamodule = instantiate_group("data", data_cfg)
    state = checkpoint.get(type(datamodule).__qualname__)
    if state and not data:
        datamodule.load_state_dict(state)
    check_same_shape(task, datamodule, path)
    return task, datamodule, checkpoint


def check_same_shape(task: pl.LightningModule, datamodule: DataModule, path: str) -> None:
    expected = {k: task.hparams[k] for k in ("input_shape", "num_classes") if task.hparams.get(k) is not None}
    actual = {k: v for k, v in datamodule.describe().items() if k in expected}
    if expected != actual:
        raise ConfigError(
            f"{path} was trained on data of shape {expected}, but the chosen data has {actual}: "
            "evaluate on data with the same image shape and number of classes"
        )
