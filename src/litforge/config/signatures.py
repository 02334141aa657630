"""Typed arguments: the class a config node builds says what each of its arguments takes, beside the code.

A constructor annotates an argument `Annotated[int, Range(ge=1, example=64)]` (or plain `int`, `float | None`, ...);
:func:`check_target` binds a config node with a `_target_` to that signature before anything is built: a key the
target does not take, a value of the wrong type or out of range is one ConfigError line naming `group.key`, the
value, what it takes and an example. A user's own datamodule, model or task is checked the same way, with no table
to edit. The target is imported when its node is checked (preflight runs this after the cheap checks, so `--help`
and a typo caught by them stay torch-free).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from litforge.core.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """Bounds of a number argument: `gt`/`lt` exclusive, `ge`/`le` inclusive; `example` a valid value."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    example: Any = None

    def holds(self, v: Any) -> bool:
        return (self.ge is None or v >= self.ge) and (self.gt is None or v > self.gt) \
            and (self.le is None or v <= self.le) and (self.lt is None or v < self.lt)

    def words(self) -> str:
        lo = f"{'(' if self.gt is not None else '['}{self.gt if self.gt is not None else self.ge}"
        hi = f"{self.lt if self.lt is not None else self.le}{')' if self.lt is not None else ']'}"
        if (self.gt, self.ge) == (None, None):
            return f"{'<' if self.lt is not None else '<='} {hi[:-1]}"
        if (self.lt, self.le) == (None, None):
            return f"{'>' if self.gt is not None else '>='} {lo[1:]}"
        return f"in {lo}, {hi}"


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
          tuple: "a list", dict: "a mapping"}


def _fits(kind: Any, v: Any) -> bool | None:
    """Whether `v` fits the plain type `kind`; None when the type is not one a config value can be judged by."""
    origin = typing.get_origin(kind) or kind
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(k, v) for k in typing.get_args(kind)]
        return True if any(verdicts) or None in verdicts else False
    if typing.get_origin(kind) is typing.Annotated:
        return _fits(typing.get_args(kind)[0], v)
    if kind is type(None):
        return v is None
    if kind is typing.Any or origin not in _KINDS:
        return None
    if origin is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if origin is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if origin in (list, tuple):
        return isinstance(v, (list, tuple))
    return isinstance(v, origin)


def _words(kind: Any) -> str:
    if typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join("null" if k is type(None) else _words(k) for k in typing.get_args(kind))
    return _KINDS.get(typing.get_origin(kind) or kind, getattr(kind, "__name__", str(kind)))


def _ranges(kind: Any) -> list[Range]:
    """The Range markers of an annotation, also inside `Annotated[...] | None`."""
    if typing.get_origin(kind) is typing.Annotated:
        return [m for m in kind.__metadata__ if isinstance(m, Range)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return [r for k in typing.get_args(kind) for r in _ranges(k)]
    return []


def parameters(target: Any) -> tuple[dict[str, Any], bool]:
    """{argument: annotation (or Any)} of a class or function, following `**kwargs` up the base classes, and
    whether it still takes any keyword at the end (then an unknown key cannot be judged)."""
    functions = [c.__init__ for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    found: dict[str, Any] = {}
    for function in functions:
        try:
            params = list(inspect.signature(function).parameters.values())
            hints = typing.get_type_hints(function, include_extras=True)
        except Exception:  # a C function, or an annotation naming what is not importable here: judge nothing
            return found, True
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in found:
                found[p.name] = hints.get(p.name, typing.Any)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return found, False
    return found, True


def check_target(scope: str, node: Any) -> None:
    """Bind the keys of `node` (a mapping with `_target_`) to its target's signature; ConfigError on a mismatch."""
    from hydra.utils import get_object

    target_name = node.get("_target_") if isinstance(node, Mapping) or OmegaConf.is_dict(node) else None
    if not isinstance(target_name, str):
        return
    try:
        target = get_object(target_name)
    except Exception:  # an import error is the build's to report (instantiate's one line names the group)
        return
    params, open_ended = parameters(target)
    for key in node.keys():
        key = str(key)
        if key.startswith("_"):
            continue
        if key not in params:
            if open_ended:
                continue
            raise ConfigError(f"{scope}.{key} is not an argument of {target_name} (it takes: {', '.join(params)}): "
                              f"remove {scope}.{key} or fix its spelling")
        try:
            value = node[key]
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except Exception:  # an interpolation that resolves only inside a Hydra job: checked when it is built
            continue
        if value is None:  # null: filled in by the code that builds the node (a partial's caller), or a default
            continue
        check_argument(f"{scope}.{key}", value, params[key])


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


def check_argument(key: str, value: Any, kind: Any) -> None:
    fits = _fits(kind, value)
    ranges = _ranges(kind) if fits and isinstance(value, (int, float)) and not isinstance(value, bool) else []
    bad = next((r for r in ranges if not r.holds(value)), None)
    if fits is False or bad is not None:
        example = next((r.example for r in _ranges(kind) if r.example is not None), None)
        expect = _words(kind) + (f" {bad.words()}" if bad else "")
        raise ConfigError(f"{key}={shown(value)}: expected {expect}" + (f", e.g. {key}={example}" if example is not None
                                                                        else ""))
