"""Typed arguments: the class a config node builds says what each of its arguments takes, beside the code.

A constructor annotates an argument `Annotated[int, Range(ge=1, example=64)]` (or plain `int`, `float | None`, ...);
:func:`check_target` binds a config node with a `_target_` to that signature before anything is built: a key the
target does not take, a value of the wrong type or out of range is one ConfigError line naming `group.key`, the
value, what it takes and an example. A user's own datamodule, model or task is checked the same way, with no table
to edit. The target is imported when its node is checked (preflight runs this after the cheap checks, so `--help`
and a typo caught by them stay torch-free).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import OmegaConf

from litforge.core.bounds import Check, Range
from litforge.core.errors import ConfigError

__all__ = ["Check", "Range", "check_target", "parameters", "shown"]


_LISTS = (list, tuple, Sequence)
_FOREIGN = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "torchvision", "torchmetrics")
_KINDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    list: "a list",
    tuple: "a list",
    Sequence: "a list",
    dict: "a mapping",
}


def _fits(kind: Any, v: Any) -> bool | None:
    """Whether `v` fits the plain type `kind`; None when the type is not one a config value can be judged by."""
    origin = typing.get_origin(kind) or kind
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(k, v) for k in typing.get_args(kind)]
        return True if any(verdicts) or None in verdicts else False
    if typing.get_origin(kind) is typing.Annotated:
        inner, markers = _fits(typing.get_args(kind)[0], v), _ranges(kind)
        if inner is None and not any(isinstance(m, Check) for m in markers):
            return None
        return inner is not False and all(m.holds(v) for m in markers)
    if origin is typing.Literal:
        return any(type(v) is type(o) and v == o for o in typing.get_args(kind))
    if kind is type(None):
        return v is None
    if kind is typing.Any or origin not in _KINDS:
        return None
    if origin is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if origin is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if origin in _LISTS:
        args = typing.get_args(kind)
        return isinstance(v, (list, tuple)) and (
            not args or args[-1] is Ellipsis and len(args) == 2 or all(_fits(args[0], x) is not False for x in v)
        )
    return isinstance(v, origin)


def _words(kind: Any) -> str:
    """What an annotation takes, in words: `an integer >= 1`, `a non-empty list of integers >= 1`, `one of a, b`."""
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        base, ranges = typing.get_args(kind)[0], _ranges(kind)
        checks = [m.words for m in kind.__metadata__ if isinstance(m, Check)]
        if checks:
            return " ".join(checks)
        if typing.get_origin(base) in _LISTS and any(isinstance(r, Range) and r.min_items for r in ranges):
            return "a non-empty " + _words(base)[2:]
        nullable = typing.get_origin(base) in (typing.Union, types.UnionType) and type(None) in typing.get_args(base)
        base = typing.Union[tuple(k for k in typing.get_args(base) if k is not type(None))] if nullable else base
        words = [_words(base), *(w for r in ranges if isinstance(r, Range) and (w := r.words()))]
        return " ".join(words) + (" (or null)" if nullable else "")
    if origin in (typing.Union, types.UnionType):  # `true, false, warn or null`
        items = [
            w
            for k in typing.get_args(kind)
            for w in (
                [shown(o, quote=False) for o in typing.get_args(k)]
                if typing.get_origin(k) is typing.Literal
                else ["true", "false"]
                if k is bool
                else ["null"]
                if k is type(None)
                else [_words(k)]
            )
        ]
        return ", ".join(items[:-1]) + " or " + items[-1]
    if origin is typing.Literal:
        return "one of " + ", ".join(shown(o, quote=False) for o in typing.get_args(kind))
    if origin in _LISTS and typing.get_args(kind):
        item = _words(typing.get_args(kind)[0]).split(" ", 1)
        return f"a list of {item[1].replace(' ', 's ', 1) if ' ' in item[1] else item[1] + 's'}"
    return _KINDS.get(origin or kind, getattr(kind, "__name__", str(kind)))


def _ranges(kind: Any, deep: bool = False) -> list[Range | Check]:
    """The Range markers of an annotation, also inside `Annotated[...] | None` (and inside `list[...]` when deep)."""
    if typing.get_origin(kind) is typing.Annotated:
        own = [m for m in kind.__metadata__ if isinstance(m, (Range, Check))]
        return own + (_ranges(typing.get_args(kind)[0], deep) if deep else [])
    if typing.get_origin(kind) in (typing.Union, types.UnionType) or deep and typing.get_origin(kind) in _LISTS:
        return [r for k in typing.get_args(kind) for r in _ranges(k, deep)]
    return []


def parameters(target: Any) -> tuple[dict[str, Any], bool]:
    """{argument: (annotation or Any, default or None)} of a class or function, following `**kwargs` up the base
    classes, and whether it still takes any keyword at the end (then an unknown key cannot be judged)."""
    functions = (
        [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    )
    found: dict[str, Any] = {}
    for function in functions:
        try:
            params = list(inspect.signature(function).parameters.values())
            hints = typing.get_type_hints(function, include_extras=True)
        except Exception:  # a C function, or an annotation naming what is not importable here: judge nothing
            return found, True
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in found:
                found[p.name] = (hints.get(p.name, typing.Any), None if p.default is p.empty else p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return found, False
        if (
            str(getattr(function, "__module__", "")).split(".")[0] in _FOREIGN
        ):  # a library's **kwargs may go anywhere (DDP's to torch)
            return found, True
    return found, True


GROUP_TARGETS = {"trainer": "pytorch_lightning.Trainer"}  # a group built without a `_target_`: what it builds


def check_target(
    scope: str, node: Any, imports: bool = True, target_name: str | None = None, signature: Any = None
) -> None:
    """Bind the keys of `node` to its target's signature, with litforge's stand-in for a library class
    (litforge.config.library) on top; ConfigError on a mismatch. Without `imports`, only the torch-free stand-in is
    bound (unknown keys then wait for the pass that imports). `target_name` names a group without a `_target_`;
    `signature` (parameters' answer) binds to a structured config instead, its unknown keys left to others."""
    from hydra.utils import get_object

    from litforge.config.library import STAND_INS

    if not (isinstance(node, Mapping) or OmegaConf.is_dict(node)):
        return
    name = str(target_name or node.get("_target_") or "")
    stand_in = STAND_INS.get(name)
    params: dict[str, Any] = {}
    if signature is not None:
        params, open_ended = dict(signature[0]), True
    elif not imports or stand_in is not None and "." not in name and name not in GROUP_TARGETS:
        open_ended = not imports  # a group litforge reads itself (scheduler's interval) takes only its stand-in's
        if stand_in is None:
            return
    elif "." in name or name in GROUP_TARGETS:
        try:
            params, open_ended = parameters(get_object(GROUP_TARGETS.get(name, name)))
        except Exception as exc:  # the target does not import: say why, before anything runs
            raise import_failure(scope, name, exc) from None
    else:
        return
    if stand_in is not None:  # its bounds, for the arguments the target takes
        params.update({k: v for k, v in parameters(stand_in)[0].items() if k in params or not params or open_ended})
    bind(scope, node, params, open_ended, GROUP_TARGETS.get(name, name))


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


def bind(scope: str, node: Any, params: dict[str, Any], open_ended: bool, name: Any) -> None:
    """Each key of `node` against `params` ({argument: (annotation, default)}); a mapping whose annotation is a
    dataclass is bound to that dataclass's fields in turn."""
    for key in [str(k) for k in node.keys() if not str(k).startswith("_")]:
        full = f"{scope}.{key}" if scope else key
        if key not in params:
            if open_ended:
                continue
            raise ConfigError(
                f"{full} is not an argument of {name} (it takes: {', '.join(params)}): remove {full} or fix its "
                "spelling"
            )
        if OmegaConf.is_dict(node) and OmegaConf.is_missing(node, key):
            raise ConfigError(f"{full} has no value and is required: pass {full}=<value>")
        kind, default = params[key]
        structured = [k for k in (kind, *typing.get_args(kind)) if isinstance(k, type) and dataclasses.is_dataclass(k)]
        try:
            value = node[key]
            if structured and OmegaConf.is_dict(value):
                bind(full, value, parameters(structured[0])[0], False, getattr(structured[0], "__name__", key))
                continue
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except ConfigError:
            raise
        except Exception:  # an interpolation that resolves only inside a Hydra job: checked when it is built
            continue
        if value is None and (default is None or _fits(kind, None) is not False):
            continue  # null where the argument allows it, or one the builder fills in (a partial's caller)
        check_argument(full, value, kind, default)


def shown(value: Any, quote: bool = True) -> str:
    """A value as it would be typed on the command line (`null`, `true`, `[1,2]`; text quoted when `quote`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if quote else value
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(shown(v, quote) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{shown(v, quote)}" for k, v in value.items()) + "}"
    return str(value)


def check_argument(key: str, value: Any, kind: Any, default: Any = None) -> None:
    """One argument's value against its annotation (a Range marker anywhere in it bounds it); the example shown is
    the marker's, else the argument's default."""
    if _fits(kind, value) is False:
        literal = [
            typing.get_args(k)[0] for k in [kind, *typing.get_args(kind)] if typing.get_origin(k) is typing.Literal
        ]
        example = next(
            (r.example for r in _ranges(kind, deep=True) if r.example is not None),
            default if default is not None else (literal or [None])[0],
        )
        raise ConfigError(
            f"{key}={shown(value)}: expected {_words(kind)}"
            + (f", e.g. {key}={shown(example, quote=False)}" if example is not None else "")
        )
