"""The one config check: pydantic judges a composed config against the typed signatures of what it builds.

Every value a user can set is typed where it is used: a constructor's annotation (pydantic / annotated-types, or
litforge.core.bounds' aliases), a library class's stand-in (litforge.config.library), the jobs' own keys
(litforge.jobs.settings.JobSettings); what reads several keys at once is litforge.config.relations. Each value is
judged by pydantic in strict mode (no `"abc"` or `1.5` for an int, no `"true"` for a bool; an int is a float), and a
refusal is one line: the key, the value, what it takes and an example that passes.

Once per run, where the job starts: :func:`check_config` on the command line (litforge.cli.preflight, before Hydra
makes a run folder), :func:`check_at_start` in each job, which skips a config preflight already checked. The builders
take checked values. A class's signature is read from its source first (litforge.config.source), so a mistake in a
user's own class is refused before torch is imported; library classes and what the source cannot tell are judged
after, with the class imported.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, TypeAdapter

from litforge.config.library import STAND_INS
from litforge.config.relations import MOVED_KEYS, RELATIONS, Relation, moved_key_message
from litforge.config.source import read_signature
from litforge.core.errors import ConfigError
from litforge.core.instantiate import import_failure
from litforge.jobs.settings import JobSettings

BUILT_GROUPS = ("data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer", "strategy")
NAMED_GROUPS = ("callbacks", "logger")  # {name: {_target_: ...}}: each entry is its own scope
GROUP_TARGETS = {"trainer": "pytorch_lightning.Trainer"}  # a group built without a `_target_`: what it builds
_FOREIGN = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "torchvision", "torchmetrics")
_ADAPTERS: dict[int, tuple[Any, TypeAdapter[Any] | None]] = {}
_CHECKED: set[str] = set()  # digests of the configs checked in this process
_MISSING = object()
Params = dict[str, tuple[Any, Any]]  # argument -> (annotation, default)


def check_config(cfg: Any) -> None:
    """Everything, once: moved keys, the job's own keys, each group's values, the relations; then what needs the
    targets imported (torch with them)."""
    for old in MOVED_KEYS:
        if OmegaConf.is_config(cfg) and OmegaConf.select(cfg, old, throw_on_missing=False) is not None:
            raise ConfigError(moved_key_message(old, OmegaConf.select(cfg, old)))
    own = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k not in BUILT_GROUPS and k != "hydra"])
    bind("", own, fields(JobSettings), True, "JobSettings")
    _check(cfg, [s for g in BUILT_GROUPS for s in _scopes(g, cfg.get(g))], RELATIONS)
    _CHECKED.add(_digest(cfg))


def check_at_start(cfg: Any) -> None:
    """A job's start: check `cfg` unless this process checked the same config already (the command line's)."""
    if _digest(cfg) not in _CHECKED:
        check_config(cfg)


def check_group(scope: str, node: Any) -> None:
    """One group (`data`, `callbacks.<name>`, ...) and its own relations, e.g. for a group composed in code."""
    own = [r for r in RELATIONS if {_scope(k) for k in r.keys} == {scope}]
    _check(OmegaConf.create({}) if node is None else _nest(scope, node), [(scope, node)], own)


def _check(cfg: Any, scopes: list[tuple[str, Any]], relations: typing.Sequence[Relation]) -> None:
    pending = []
    for scope, node in [(s, n) for s, n in scopes if n is not None]:
        check_package(scope, node)
        pending += [(key, sub) for key, sub in _targets(scope, node) if not _bind_target(key, sub, scope, False)]
    for relation in relations:
        values = [_lookup(cfg, key) for key in relation.keys]
        try:
            holds = any(v is _MISSING for v in values) or relation.holds(*values)
        except TypeError:  # a value of the wrong type: its own check says so
            holds = True
        if not holds:
            raise ConfigError(relation.message.format(*(shown(v, quote=False) for v in values)))
    for key, sub in pending:
        _bind_target(key, sub, key.split(".")[0], True)


def _bind_target(key: str, node: Any, scope: str, imports: bool) -> bool:
    """Bind one node to what it builds; False when that needs the target imported (then called again with
    `imports`). The source is read first; a library class's stand-in bounds it before its import."""
    own = key == scope and "_target_" not in node and scope in BUILT_GROUPS  # a group built without a `_target_`
    name = scope if own else str(node.get("_target_") or "")
    stand_in = {k: v for k, v in _signature(STAND_INS[name])[0].items()} if name in STAND_INS else {}
    if "." not in name and name not in GROUP_TARGETS:  # a group litforge reads itself (scheduler, strategy by name)
        bind(key, node, stand_in, not stand_in, name)
        return True
    name = GROUP_TARGETS.get(name, name)
    if not imports:
        read = None if name.split(".")[0] in _FOREIGN else read_signature(name)
        bind(key, node, *(read or (stand_in, True)), name)
        return read is not None
    from hydra.utils import get_object

    try:
        params, open_ended = _signature(get_object(name))
    except Exception as exc:  # the target does not import: say why, before anything runs
        raise import_failure(key, name, exc) from None
    judged = {k: (Any, d) for k, (_, d) in stand_in.items() if k in params or open_ended}
    bind(key, node, params | judged, open_ended, name)
    return True


def bind(scope: str, node: Any, params: Params, open_ended: bool, name: str) -> None:
    """Each key of `node` against `params`; a mapping whose annotation is a pydantic model is bound to its fields."""
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
        try:
            value = node[key]
            model = next((m for m in (kind, *typing.get_args(kind)) if _is_model(m)), None)
            if model is not None and OmegaConf.is_dict(value):
                bind(full, value, fields(model), False, model.__name__)
                continue
            if OmegaConf.is_dict(value) and "_target_" in value:
                continue  # a node of its own, bound to what it builds
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except ConfigError:
            raise
        except Exception:  # an interpolation that resolves only inside a Hydra job: checked there
            continue
        if value is None and default is None:
            continue  # null where the builder fills the value in (a partial's caller)
        judge = adapter(kind)
        if judge is not None and not _passes(judge, value):
            raise ConfigError(refusal(full, value, kind, default))


def adapter(kind: Any) -> TypeAdapter[Any] | None:
    """pydantic's validator for an annotation (None for one it cannot build: a forward reference, ...)."""
    if (entry := _ADAPTERS.get(id(kind))) is None or entry[0] is not kind:
        entry = _ADAPTERS[id(kind)] = (kind, None)
        for config in (ConfigDict(arbitrary_types_allowed=True), None):  # a model's own config stands alone
            try:
                entry = _ADAPTERS[id(kind)] = (kind, TypeAdapter(kind, config=config))
                break
            except Exception:
                continue
    return entry[1]


def _passes(judge: TypeAdapter[Any], value: Any) -> bool:
    try:
        judge.validate_python(value, strict=True)
        return True
    except Exception:
        return False


def refusal(key: str, value: Any, kind: Any, default: Any) -> str:
    """`key=value: expected <what the annotation takes>, e.g. key=<a value that passes>`."""
    judge = adapter(kind)
    assert judge is not None
    try:
        schema = judge.json_schema()
    except Exception:  # a type JSON Schema cannot say (an arbitrary class): the annotation as written
        schema = {"description": re.sub(r"\b(?:typing\.|[\w.]+\.(?=\w+\b))", "", str(kind))}
    candidates = [*_found(schema, "examples"), default, *_found(schema, "enum"), *_found(schema, "const", False)]
    example = next((c for c in candidates if c is not None and _passes(judge, c)), None)
    return f"{key}={shown(value)}: expected {words(schema)}" + (
        f", e.g. {key}={shown(example, quote=False)}" if example is not None else ""
    )


def words(schema: Mapping[str, Any]) -> str:
    """What a JSON Schema (pydantic's description of an annotation) takes, in words: `an integer >= 1`."""
    if "description" in schema:
        return str(schema["description"])
    if "anyOf" in schema:
        items = [w for s in schema["anyOf"] for w in _choices(s)]
        return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0]
    if "enum" in schema:
        return "one of " + ", ".join(shown(v, quote=False) for v in schema["enum"])
    if "const" in schema:
        return shown(schema["const"], quote=False)
    kind = schema.get("type")
    if kind == "array":
        item = schema.get("items") or schema.get("prefixItems")
        size, least = schema.get("maxItems"), schema.get("minItems", 0)
        text = "a list" + (f" of {size}" if size is not None and size == least else "")
        text = text.replace("a list", "a non-empty list") if least and size != least else text
        if isinstance(item, dict) and item:
            text += (" " if size == least else " of ") + re.sub(r"^an? (\w+)", r"\1s", words(item))
        return text
    text = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}.get(
        str(kind), "a mapping" if kind == "object" else "null" if kind == "null" else "a value"
    )
    low = ("[", schema["minimum"]) if "minimum" in schema else ("(", schema.get("exclusiveMinimum"))
    high = ("]", schema["maximum"]) if "maximum" in schema else (")", schema.get("exclusiveMaximum"))
    if low[1] is not None and high[1] is not None:
        return f"{text} in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low[1] is not None or high[1] is not None:
        sign, bound = (
            (">" if low[0] == "(" else ">=", low[1])
            if low[1] is not None
            else ("<" if high[0] == ")" else "<=", high[1])
        )
        return f"{text} {sign} {bound}"
    return text


def _choices(schema: Mapping[str, Any]) -> list[str]:
    if "enum" in schema or "const" in schema:
        return [shown(v, quote=False) for v in schema.get("enum", [schema.get("const")])]
    return ["true", "false"] if schema.get("type") == "boolean" else [words(schema)]


def _found(schema: Any, key: str, listed: bool = True) -> Iterator[Any]:
    """Every value under `key` anywhere in a JSON Schema (a list of them where `listed`)."""
    if isinstance(schema, Mapping):
        if key in schema:
            yield from schema[key] if listed else [schema[key]]
        for value in schema.values():
            yield from _found(value, key, listed)
    elif isinstance(schema, list):
        for value in schema:
            yield from _found(value, key, listed)


def shown(value: Any, quote: bool = True) -> str:
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


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def fields(model: type[BaseModel]) -> Params:
    hints = typing.get_type_hints(model, include_extras=True)
    return {n: (hints[n], f.get_default(call_default_factory=True)) for n, f in model.model_fields.items()}


def _signature(target: Any) -> tuple[Params, bool]:
    """The arguments of an imported class or function, following `**kwargs` up the base classes, and whether it
    still takes any keyword at the end (then an unknown key cannot be judged)."""
    chain = (
        [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    )
    found: Params = {}
    for function in chain:
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
        if str(getattr(function, "__module__", "")).split(".")[0] in _FOREIGN:  # DDP's **kwargs go to torch
            return found, True
    return found, True


def check_package(scope: str, node: Any) -> None:
    """Refuse a group whose `_target_` needs an extra that is not installed (litforge.runtime.extras); a tracking
    server that does not answer (MLflow would retry for minutes, then fail inside fit)."""
    import socket
    from urllib.parse import urlsplit

    from litforge.runtime.extras import require

    target = _lookup(node, "_target_")
    require(str(target), f"{scope} ({target})")
    uri = _lookup(node, "tracking_uri")
    if isinstance(uri, str) and uri.startswith(("http://", "https://")):
        url = urlsplit(uri)
        try:
            socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 3).close()
        except OSError as exc:
            raise ConfigError(
                f"{scope}.tracking_uri={uri}: no server answers there ({exc.strerror or exc}): start it "
                f"(mlflow server --port {url.port or 5000}), or pass {scope}.tracking_uri=null for the local store"
            ) from None


def _digest(cfg: Any) -> str:
    return hashlib.sha1(OmegaConf.to_yaml(cfg).encode()).hexdigest() if OmegaConf.is_config(cfg) else ""


def _scopes(group: str, node: Any) -> list[tuple[str, Any]]:
    return [(f"{group}.{n}", node[n]) for n in node] if group in NAMED_GROUPS and node else [(group, node)]


def _nest(scope: str, node: Any) -> Any:
    for part in reversed(scope.split(".")):
        node = {part: node}
    return OmegaConf.create(node)


def _targets(prefix: str, node: Any) -> list[tuple[str, Any]]:
    """(key, node) of the group itself and of every mapping with a `_target_` under it."""
    found = [(prefix, node)] if OmegaConf.is_dict(node) or isinstance(node, Mapping) else []
    for key in list(node.keys()) if found else []:
        try:
            sub = node[key]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            continue
        found += [t for t in _targets(f"{prefix}.{key}", sub) if "_target_" in t[1]]
    return found


def _scope(key: str) -> str | None:
    """The scope a full key belongs to: `data`, `callbacks.<name>`; None for what the job reads itself."""
    parts = key.split(".")
    return ".".join(parts[:2]) if parts[0] in NAMED_GROUPS else parts[0] if parts[0] in BUILT_GROUPS else None


def _lookup(node: Any, key: str) -> Any:
    """The value at dotted `key` under `node` (resolved), or _MISSING when a part is absent or cannot resolve."""
    for part in key.split("."):
        if not (isinstance(node, Mapping) or OmegaConf.is_dict(node)) or part not in node.keys():
            return _MISSING
        try:
            node = node[part]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            return _MISSING
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
