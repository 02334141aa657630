"""The one config check: pydantic judges a composed config against the typed signatures of what it builds.

Types sit where values are used (docs/checks.md): a constructor's annotation, a library class's row in
litforge.config.library, the jobs' own keys in litforge.config.settings; keys read together in .relations.
Once per run, as part of the job's declared checks (litforge.jobs.checks: on the command line before Hydra makes a run
folder, or where a job called in code starts), every mistake a line. A class is read from its source first
(litforge.config.source), so a mistake in a user's class is refused before torch loads.
"""

from __future__ import annotations

import inspect
import re
import socket
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, TypeAdapter

from litforge.config.library import STAND_INS
from litforge.config.relations import MOVED_KEYS, RELATIONS, Relation, moved_key_message
from litforge.config.settings import JobSettings
from litforge.config.source import read_signature
from litforge.core.errors import ConfigError
from litforge.core.instantiate import import_failure, locate
from litforge.runtime.extras import require

BUILT_GROUPS = ("data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer", "strategy")
NAMED_GROUPS = ("callbacks", "logger")  # {name: {_target_: ...}}: each entry is its own scope
GROUP_TARGETS = {"trainer": "pytorch_lightning.Trainer"}  # a group built without a `_target_`: what it builds
_FOREIGN = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "torchvision", "torchmetrics")
_ADAPTERS: dict[int, tuple[object, TypeAdapter[Any] | None]] = {}
_MISSING = _UNSET = object()
Params = dict[str, tuple[object, object]]  # argument -> (annotation, default)


def check_config(cfg: DictConfig, imports: bool = True) -> None:
    """Everything, once, every mistake (one line each): moved keys, the job's own keys, each group's values, the
    relations of keys that passed; then, when all that passed and `imports`, what needs a target imported (torch)."""
    found = {old: moved_key_message(old, v) for old in MOVED_KEYS if (v := OmegaConf.select(cfg, old)) is not None}
    own = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k not in BUILT_GROUPS and k != "hydra"])
    bind("", own, fields(JobSettings), True, "JobSettings", found)
    named = {g: [(f"{g}.{n}", node[n]) for n in node] for g in NAMED_GROUPS if (node := OmegaConf.select(cfg, g))}
    scopes = [s for g in BUILT_GROUPS for s in named.get(g, [(g, OmegaConf.select(cfg, g))])]
    _check(cfg, scopes, RELATIONS, found, imports)


def check_group(scope: str, node: DictConfig) -> None:
    """One group (`data`, `callbacks.<name>`, ...) and its own relations, e.g. for a group composed in code."""
    nested = OmegaConf.create({})
    OmegaConf.update(nested, scope, node, force_add=True)
    own = [r for r in RELATIONS if all(k.startswith(scope + ".") for k in r[0])]
    _check(nested, [(scope, OmegaConf.select(nested, scope))], own, {}, True)


def _check(
    cfg: DictConfig, scopes: list[tuple[str, object]], rules: Sequence[Relation], found: dict[str, str], imports: bool
) -> None:
    """Each group's mapping, then the relations (`rules`) none of whose keys was refused; torch's imports (4-6 s) only
    when all passed."""
    pending = []
    for scope, node in [(s, n) for s, n in scopes if isinstance(n, DictConfig)]:
        try:
            check_package(scope, node)
        except ConfigError as exc:  # its extra is not installed: the group cannot be judged further
            found[scope] = str(exc)
            continue
        pending += [(key, sub) for key, sub in _targets(scope, node) if not _bind_target(key, sub, False, found)]
    for keys, holds, message in rules:
        values = [_lookup(cfg, key) for key in keys]
        if _MISSING in values or any(k == f or k.startswith(f + ".") for k in keys for f in found):
            continue  # a key absent, or refused on its own (its line says so)
        try:
            fails = not holds(*values)
        except TypeError:  # a value of the wrong type: its own check (below) says so
            fails = False
        if fails:
            line = message(*values) if callable(message) else message.format(*(shown(v, False) for v in values))
            found[",".join(keys)] = str(line)
    for key, sub in pending if imports and not found else []:
        _bind_target(key, sub, True, found)
    if found:
        raise ConfigError(*found.values())


def _bind_target(key: str, node: DictConfig, imports: bool, found: dict[str, str]) -> bool:
    """Bind one node to what it builds; False when that needs the target imported (then called with `imports`)."""
    name = key if "." not in key and "_target_" not in node else str(node.get("_target_") or "")
    table = {k: (v, _UNSET) for k, v in STAND_INS.get(name, {}).items()}
    if "." not in name and name not in GROUP_TARGETS:  # a group litforge reads itself (scheduler, strategy by name)
        bind(key, node, table, not table, name, found)
        return True
    name = GROUP_TARGETS.get(name, name)
    if not imports:
        read = None if name.split(".")[0] in _FOREIGN else read_signature(name)
        params, open_ended = read or (table, True)
        bind(key, node, params, open_ended, name, found)
        return read is not None
    try:
        params, open_ended = signature(locate(name))
    except Exception as exc:  # the target does not import: say why, before anything runs
        found[key] = str(import_failure(key, name, exc))
        return True
    bind(key, node, params | {k: (object, d) for k, (_, d) in table.items()}, open_ended, name, found)  # judged above
    return True


def bind(scope: str, node: DictConfig, params: Params, open_ended: bool, name: str, found: dict[str, str]) -> None:
    """Each key of `node` against `params`, each mistake into `found` (key -> its line); a mapping whose annotation
    is a pydantic model is bound to its fields."""
    for key in [str(k) for k in node if not str(k).startswith("_")]:
        full = f"{scope}.{key}".lstrip(".")
        if full in found or OmegaConf.is_interpolation(node, key) and _source(node, key) in found:
            continue  # refused already (a moved key), or `${seed}` copying a key refused on a line of its own
        if key not in params:
            if not open_ended:
                found[full] = (
                    f"{full} is not an argument of {name} (it takes: {', '.join(params)}): remove {full} or fix its "
                    "spelling"
                )
            continue
        if OmegaConf.is_missing(node, key):
            found[full] = f"{full} has no value and is required: pass {full}=<value>"
            continue
        kind, default = params[key]
        try:
            value = node[key]
            if OmegaConf.is_dict(value) and "_target_" in value:
                continue  # a node of its own, bound to what it builds
            models = [m for m in (kind, *typing.get_args(kind)) if _is_model(m)]
            if models and isinstance(value, DictConfig):
                bind(full, value, fields(models[0]), False, models[0].__name__, found)
                continue
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except Exception:  # an interpolation that resolves only inside a Hydra job: checked there
            continue
        judge = adapter(kind)
        if not (value is None and default is None) and judge is not None and not _passes(judge, value):
            found[full] = refusal(full, value, judge, default)  # (null with a null default: the builder fills in)


def _source(node: DictConfig, key: str) -> str:
    """The key an interpolation like `${seed}` copies."""
    raw: Any = OmegaConf.to_container(node, resolve=False)
    return str(raw[key]).removeprefix("${").removesuffix("}")


def adapter(kind: object) -> TypeAdapter[Any] | None:
    """pydantic's validator for an annotation (None for one it cannot build: a forward reference, ...)."""
    if (entry := _ADAPTERS.get(id(kind))) is None or entry[0] is not kind:
        judge: TypeAdapter[Any] | None
        form: Any = kind  # an annotation: a type form, which typing on Python 3.11 cannot name
        try:  # (a model's own config stands alone)
            judge = TypeAdapter(form, config=None if _is_model(kind) else ConfigDict(arbitrary_types_allowed=True))
        except Exception:
            judge = None
        entry = _ADAPTERS[id(kind)] = (kind, judge)
    return entry[1]


def _passes(judge: TypeAdapter[Any], value: object) -> bool:
    try:
        judge.validate_python(value, strict=True)
        return True
    except Exception:
        return False


def refusal(key: str, value: object, judge: TypeAdapter[Any], default: object) -> str:
    """`key=value: expected <what the annotation takes>, e.g. key=<a value that passes>`."""
    try:
        schema = judge.json_schema()
    except Exception:  # a type JSON Schema cannot say (an arbitrary class)
        schema = {"description": "a value of its annotated type"}
    candidates = [[value], *_walk(schema, "examples"), default, _sample(schema)]  # [value]: `mypkg` for a list
    example = next((c for c in candidates if c not in (None, _UNSET) and _passes(judge, c)), None)
    return f"{key}={shown(value)}: expected {words(schema)}" + (
        f", e.g. {key}={shown(example, quote=False)}" if example is not None else ""
    )


def words(schema: Mapping[str, Any]) -> str:
    """What a JSON Schema (pydantic's account of an annotation) takes, in words: `an integer >= 1`."""
    if "description" in schema or "enum" in schema or "const" in schema:
        return schema.get("description") or "one of " + ", ".join(_choices(schema))
    if "anyOf" in schema:
        items = [w for s in schema["anyOf"] for w in _choices(s)]
        return " or ".join([", ".join(items[:-1]), items[-1]][-len(items) :])
    if schema.get("type") == "array":
        least, most, item = schema.get("minItems", 0), schema.get("maxItems"), schema.get("items") or {}
        text = f"a list of {most}" if most == least else "a non-empty list" if least else "a list"
        each = re.sub(r"^an? (\w+)", r"\1s", words(item)) if item else ""
        return f"{text}{'' if most == least else ' of'} {each}" if each else text
    kinds = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}
    kinds |= {"object": "a mapping", "null": "null"}
    low = [(f"[{b}", f">= {b}") for b in [schema.get("minimum")] if b is not None]
    low += [(f"({b}", f"> {b}") for b in [schema.get("exclusiveMinimum")] if b is not None]
    high = [(f"{b}]", f"<= {b}") for b in [schema.get("maximum")] if b is not None]
    high += [(f"{b})", f"< {b}") for b in [schema.get("exclusiveMaximum")] if b is not None]
    bounds = [f"in {low[0][0]}, {high[0][0]}"] if low and high else [b[1] for b in low + high]
    return " ".join([kinds.get(str(schema.get("type")), "a value"), *bounds])


def _choices(schema: Mapping[str, Any]) -> list[str]:
    if "enum" in schema or "const" in schema:
        return [shown(v, quote=False) for v in schema.get("enum", [schema.get("const")])]
    return ["true", "false"] if schema.get("type") == "boolean" and "description" not in schema else [words(schema)]


def _sample(schema: Mapping[str, Any]) -> Any:
    """A value the schema takes, made from its bounds (the example when the annotation gives none)."""
    if "anyOf" in schema:
        return next((s for s in map(_sample, schema["anyOf"]) if s is not None), None)
    if "const" in schema or "enum" in schema:
        return schema.get("const", schema.get("enum", [None])[0])
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    if schema.get("type") in ("integer", "number"):
        value = (lo + hi) / 2 if None not in (lo, hi) else lo + 1 if lo is not None else hi - 1 if hi is not None else 1
        return int(value) if schema["type"] == "integer" else float(value)
    if schema.get("type") == "array" and (item := _sample(schema.get("items") or {})) is not None:
        return [item] * max(schema.get("minItems", 1), 1)
    return {"boolean": True, "string": "auto"}.get(str(schema.get("type")))


def _walk(schema: object, key: str) -> Iterator[Any]:
    """Every value listed under `key` anywhere in a JSON Schema."""
    yield from schema.get(key, []) if isinstance(schema, Mapping) else []
    for value in schema.values() if isinstance(schema, Mapping) else schema if isinstance(schema, list) else []:
        yield from _walk(value, key)


def shown(value: object, quote: bool = True) -> str:
    """A value as it would be typed on the command line (`null`, `true`, `[1,2]`; text quoted when `quote`)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, str):
        return repr(value) if quote else value
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(shown(v, quote) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{shown(v, quote)}" for k, v in value.items()) + "}"
    return str(value)


def _is_model(kind: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def fields(model: type[BaseModel]) -> Params:
    hints = typing.get_type_hints(model, include_extras=True)
    return {n: (hints[n], f.get_default(call_default_factory=True)) for n, f in model.model_fields.items()}


def signature(target: Callable[..., object]) -> tuple[Params, bool]:
    """The arguments of an imported class or function, following `**kwargs` up the base classes, and whether it still
    takes any keyword at the end (then an unknown key cannot be judged)."""
    classes, found = target.__mro__ if inspect.isclass(target) else [], Params()
    inits = [(vars(c)["__init__"], c.__module__) for c in classes if "__init__" in vars(c)]
    for function, module in inits or [(target, target.__module__)]:
        try:
            params = list(inspect.signature(function).parameters.values())
            hints = typing.get_type_hints(function, include_extras=True)
        except Exception:  # a C function, or an annotation naming what is not importable here: judge nothing
            return found, True
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in found:
                found[p.name] = (hints.get(p.name, Any), None if p.default is p.empty else p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return found, False
        if module.split(".")[0] in _FOREIGN:  # DDP's **kwargs go to torch
            break
    return found, True


def check_package(scope: str, node: DictConfig) -> None:
    """A `_target_` that needs an extra that is not installed (litforge.runtime.extras); a tracking server that does
    not answer (MLflow would retry for minutes, then fail inside fit)."""
    require(str(target := _lookup(node, "_target_")), f"{scope} ({target})")
    if isinstance(uri := _lookup(node, "tracking_uri"), str) and uri.startswith(("http://", "https://")):
        url = urlsplit(uri)
        try:
            socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 3).close()
        except OSError as exc:
            raise ConfigError(
                f"{scope}.tracking_uri={uri}: no server answers there ({exc.strerror or exc}): start it "
                f"(mlflow server --port {url.port or 5000}), or pass {scope}.tracking_uri=null for the local store"
            ) from None


def _targets(prefix: str, node: object) -> list[tuple[str, DictConfig]]:
    """(key, node) of the group itself and of every mapping with a `_target_` under it."""
    if not isinstance(node, DictConfig):
        return []
    found = [(prefix, node)]
    for key in list(node.keys()):
        try:
            found += [t for t in _targets(f"{prefix}.{key!s}", node[key]) if "_target_" in t[1]]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            continue
    return found


def _lookup(node: DictConfig, key: str) -> Any:
    """The value at dotted `key` under `node` (resolved), or _MISSING when a part is absent or cannot resolve."""
    try:
        value = OmegaConf.select(node, key, default=_MISSING, throw_on_resolution_failure=True)
    except Exception:  # an interpolation that resolves only inside a Hydra job
        return _MISSING
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
