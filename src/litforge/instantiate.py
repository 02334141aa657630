"""Hydra's `instantiate`, with every failure a user can cause reported as one ConfigError naming the config group.

The bottom layer of litforge's config handling: tasks build their net, optimizer and scheduler with
:func:`call_partial`, the jobs build data, callbacks and loggers with :func:`instantiate_group` /
:func:`instantiate_named`, and a bad `_target_`, an unknown argument or a wrong value never reaches the user as a
traceback from inside Hydra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
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


def call_partial(cfg: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """Build a `_partial_: true` config (optimizer, scheduler, net) with the arguments only the caller knows."""
    return instantiate({k: v for k, v in cfg.items() if k != "_partial_"}, *args, **kwargs, _convert_="all")


def _short(exc: BaseException) -> str:
    text = str(exc.__cause__ or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
