"""Hydra's `instantiate`, with every failure a user can cause reported as one ConfigError naming the config group.

Building, not checking: the values were checked once when the job started (litforge.config.check). The jobs build
data, callbacks, loggers and the trainer with :func:`instantiate_group` / :func:`instantiate_named`; tasks build their
net, optimizer and scheduler with :func:`call_partial`. A bad `_target_`, an argument the target does not take or a
value only the target can judge never reaches the user as a traceback from inside Hydra. In core: every layer builds.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from litforge.core.errors import ConfigError, LitforgeError


def to_plain(node: object) -> Any:
    """A resolved, plain-Python copy of a config node (what may go into hparams and checkpoints)."""
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    return node


def instantiate_group(group: str, node: object, **kwargs: object) -> Any:
    """`instantiate` a group, errors reported against the group."""
    try:
        return instantiate(node, **kwargs, _convert_="all")
    except InstantiationException as exc:
        raise build_error(group, node, exc) from None


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


def call_partial(group: str, cfg: Mapping[str, Any], *args: object, **kwargs: object) -> Any:
    """Build a `_partial_: true` config of `group` (optimizer, scheduler, net) with the arguments only the caller
    knows (the parameters, the optimizer, the data's shape). Its values were checked when the job started."""
    try:
        return instantiate({k: v for k, v in cfg.items() if k != "_partial_"}, *args, **kwargs, _convert_="all")
    except InstantiationException as exc:
        raise build_error(group, cfg, exc, supplied=kwargs) from None


_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def build_error(
    group: str, cfg: object, exc: BaseException, supplied: Mapping[str, Any] | None = None
) -> LitforgeError:
    """One line for a failed build: the LitforgeError the target raised itself, a key the target does not take
    (`+model.foo=1`), a target that does not fit the data (`supplied`: the shape keys), or the target's own words."""
    cause = exc.__cause__ or exc
    if isinstance(cause, LitforgeError):
        return cause
    target = str(cfg["_target_"]) if isinstance(cfg, Mapping) and "_target_" in cfg else "?"  # DictConfig too
    if "Error locating target" in str(exc) or "Error loading" in str(cause):
        return import_failure(group, target, cause)
    key = unexpected_argument(cause)
    if key:
        if key in (supplied or {}):
            return ConfigError(
                f"`{group}` {target} cannot be built from {sorted(supplied or {})} ({cause}): it "
                "belongs to another task and data kind; pick a matching set, e.g. an experiment= recipe"
                + (
                    "; for labelled texts model=mlp, text_pool or text_transformer"
                    if "max_length" in (supplied or {})
                    else ""
                )
            )
        return unknown_argument(group, key, target)
    return ConfigError(
        f"could not build `{group}` ({target}): {_first_line(cause)}. Check the `{group}` options with "
        f"`python train.py --cfg job --package {group}`"
    )


def unexpected_argument(exc: BaseException) -> str | None:
    """The keyword a call refused (`TypeError: ... got an unexpected keyword argument 'foo'`), or None."""
    found = _UNEXPECTED.search(str(exc)) if isinstance(exc, TypeError) else None
    return found.group(1) if found else None


def locate(path: str) -> Any:
    """What a dotted path names, as `hydra.utils.get_object` finds it, without the ERROR record Hydra logs on a
    failure (three lines before litforge's own, which names the cause: :func:`import_failure`)."""
    hydra_log = logging.getLogger("hydra.utils")
    was, hydra_log.disabled = hydra_log.disabled, True
    try:
        return get_object(path)
    finally:
        hydra_log.disabled = was


def unknown_argument(group: str, key: str, target: str) -> ConfigError:
    """`group.key` names no argument of `target`: say which arguments it has."""
    takes = ", ".join(accepted_arguments(target))
    return ConfigError(
        f"{group}.{key} is not an argument of {target}"
        + (f" (it takes: {takes})" if takes else "")
        + f": remove {group}.{key} or fix its spelling"
    )


def accepted_arguments(target: str | Callable[..., object]) -> list[str]:
    """The keyword arguments a class or function takes, following `**kwargs` up the base classes."""
    try:
        found = locate(target) if isinstance(target, str) else target
        functions = (
            [vars(c)["__init__"] for c in found.__mro__ if "__init__" in vars(c)] if inspect.isclass(found) else [found]
        )
    except Exception:
        return []
    names: list[str] = []
    for function in functions:
        params = inspect.signature(function).parameters.values()
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return list(dict.fromkeys(names))


def import_failure(scope: str, target: str, exc: BaseException) -> ConfigError:
    """`scope`'s `_target_` does not import: one line with the real cause at the bottom of the exception chain (Hydra's
    own message stops at "Error loading '<target>':")."""
    root: BaseException = exc
    while (deeper := root.__cause__ or root.__context__) is not None:
        root = deeper
    lines = str(root).strip().splitlines()
    return ConfigError(
        f"{scope}._target_={target} does not import: {type(root).__name__}: {lines[0] if lines else ''}; check its "
        "spelling, and that its package is installed or on PYTHONPATH"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
