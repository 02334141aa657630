"""Turning the composed Hydra config into Lightning objects.

All user-facing failures of `instantiate` (a bad `_target_`, an unknown argument, a wrong value) become a
ConfigError naming the config group, so the CLI can print one line instead of a traceback from inside Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from litforge.errors import ConfigError, LitforgeError


def to_plain(node: Any) -> Any:
    """A resolved, plain-Python copy of a config node (what may go into hparams and checkpoints)."""
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    return node


def instantiate_group(group: str, node: Any, **kwargs: Any) -> Any:
    """`instantiate` with errors reported against the config group the user typed."""
    try:
        return instantiate(node, **kwargs, _convert_="all")
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, LitforgeError):
            raise cause from None
        raise ConfigError(f"could not build `{group}`: {_short(exc)}. Check the `{group}` options with "
                          f"`python train.py --cfg job --package {group}`") from None


def instantiate_named(group: str, node: Mapping[str, Any] | None) -> list[Any]:
    """Instantiate every `{name: {_target_: ...}}` entry of a group (callbacks, loggers); `name: null` disables one."""
    if not node:
        return []
    objects = []
    for name, item in node.items():
        if item is None:
            continue
        if not (isinstance(item, Mapping) or OmegaConf.is_dict(item)) or "_target_" not in item:
            raise ConfigError(f"`{group}.{name}` must be a mapping with a `_target_`, got {item!r}")
        objects.append(instantiate_group(f"{group}.{name}", item))
    return objects


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
        raise ConfigError(f"could not build the task {target}: {exc}") from None


def build_strategy(node: Any) -> Any:
    """`strategy` is either a name Lightning knows (`{name: auto}`) or an instantiable strategy config."""
    if node is None:
        return "auto"
    if "_target_" in node:
        return instantiate_group("strategy", node)
    return node.get("name", "auto")


def _short(exc: BaseException) -> str:
    text = str(exc.__cause__ or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
