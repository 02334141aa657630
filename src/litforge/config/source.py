"""A class's typed signature read from its source file, without importing it.

Why: importing a user's datamodule or net imports torch and Lightning (4-6 s on 2 cores) before a typo in its
arguments could be refused. The file is found with importlib's finders (no package `__init__` runs), parsed, and each
annotation evaluated in a namespace of typing, pydantic, annotated-types and litforge's bounds (plus the module's own
top-level functions and aliases that evaluate there). `**kwargs` is followed up the base classes the source names.
What this cannot judge (a name from torch, a base class it cannot find) is left to the check that imports the target.
"""

from __future__ import annotations

import ast
import collections.abc
import importlib.util
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

import annotated_types
import pydantic
from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, Strict, StringConstraints

import litforge
from litforge.core import bounds

# modules whose names an annotation may use: imported here for real (cheap, torch-free)
_READABLE = ("typing", "typing_extensions", "collections.abc", "pydantic", "annotated_types", "litforge.core.bounds")
_PYDANTIC = (Field, AfterValidator, BeforeValidator, PlainValidator, StringConstraints, Strict)
_UNKNOWN = object()  # a default the source does not spell as a literal


def module_file(module: str) -> Path | None:
    """The source file of `module`, found without importing it or its packages."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    folders = list(spec.submodule_search_locations or [])
    path = Path(spec.origin)
    for part in parts[1:]:
        found = [p for f in folders for p in (Path(f) / part / "__init__.py", Path(f) / f"{part}.py") if p.is_file()]
        if not found:
            return None
        path, folders = found[0], [str(found[0].parent)] if found[0].name == "__init__.py" else []
    return path


@cache
def _module(module: str, follow: bool = True) -> tuple[dict[str, Any], dict[str, str], dict[str, ast.ClassDef]] | None:
    """(the namespace annotations evaluate in, name -> the dotted class it imports, the classes defined). With
    `follow`, a name imported from litforge or the module's own package is taken from that module's source in turn
    (one level: an alias like `Augment`)."""
    path = module_file(module)
    if path is None:
        return None
    tree = ast.parse(path.read_text(), str(path))
    space: dict[str, Any] = {**vars(typing), **vars(collections.abc), **vars(annotated_types), "typing": typing}
    space |= {f.__name__: f for f in _PYDANTIC} | {"pydantic": pydantic}
    space |= {**vars(bounds), "annotated_types": annotated_types}
    refs: dict[str, str] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):  # `import pytorch_lightning as pl`: a base written `pl.LightningModule`
            refs |= {
                alias.asname or alias.name: alias.name for alias in node.names if alias.asname or "." not in alias.name
            }
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                origin = litforge.HOMES.get(alias.name, "") if node.module == "litforge" else node.module
                refs[alias.asname or alias.name] = f"{origin}.{alias.name}"
                if origin in _READABLE:
                    space[alias.asname or alias.name] = getattr(importlib.import_module(origin), alias.name, None)
                elif follow and origin.split(".")[0] in ("litforge", module.split(".")[0]):
                    other = _module(origin, False)
                    if other is not None and alias.name in other[0]:
                        space[alias.asname or alias.name] = other[0][alias.name]
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = node
            refs[node.name] = f"{module}.{node.name}"
        elif isinstance(node, (ast.FunctionDef, ast.Assign, ast.AnnAssign)):
            try:  # a validator function or an alias the annotations use; what fails here stays undefined
                exec(compile(ast.Module([node], []), str(path), "exec"), space)
            except Exception:
                pass
    return space, refs, classes


def read_signature(target: str) -> tuple[dict[str, tuple[Any, Any]], bool] | None:
    """({argument: (annotation, default)}, whether it takes any keyword) of the class `target` names, or None when
    its source cannot tell it all (not found, an annotation that does not evaluate here, a base it cannot read)."""
    module, _, name = target.rpartition(".")
    read = _module(module) if module else None
    node = read[2].get(name) if read else None
    if read is None or node is None or node.decorator_list:  # a decorator may write the __init__ (dataclass)
        return None
    space, refs, _ = read
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    base = None
    if init is None or init.args.kwarg is not None:  # the base class's arguments come too
        bases = [read_signature(refs.get(ast.unparse(b), "")) for b in node.bases]
        if len(bases) != 1 or (base := bases[0]) is None:
            return None
    found: dict[str, tuple[Any, Any]] = {}
    if init is not None:
        args = [*init.args.posonlyargs, *init.args.args]
        defaults = [None] * (len(args) - len(init.args.defaults)) + list(init.args.defaults)
        pairs = [*zip(args, defaults, strict=True), *zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True)]
        for arg, default in pairs[1:] if args else pairs:
            try:
                written = arg.annotation
                text = written.value if isinstance(written, ast.Constant) else ast.unparse(written) if written else None
                kind = eval(str(text), dict(space)) if text is not None else Any
            except Exception:
                return None
            try:
                found[arg.arg] = (kind, None if default is None else ast.literal_eval(default))
            except ValueError:
                found[arg.arg] = (kind, _UNKNOWN)
        if init.args.kwarg is None:
            return found, False
    assert base is not None
    return {**found, **{k: v for k, v in base[0].items() if k not in found}}, base[1]


def find_method(target: str, name: str) -> ast.FunctionDef | Literal[False] | None:
    """The `def <name>` the class `target` runs, read from its source and its bases' (one from Lightning or torch
    does not count: its default is not the user's); False when none defines it, None when a base cannot be read."""
    module, _, cls = target.rpartition(".")
    read = _module(module) if module else None
    node = read[2].get(cls) if read else None
    if read is None or node is None:
        return None
    found: ast.FunctionDef | Literal[False] | None = next(
        (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == name), None
    )
    for base in [ast.unparse(b) for b in node.bases] if found is None else []:
        head, _, rest = base.partition(".")
        full = ".".join(filter(None, [read[1].get(head, head), rest]))
        if full.split(".")[0] not in ("pytorch_lightning", "lightning", "torch", "object", "Generic", "Protocol"):
            if (found := find_method(full, name)) is None or found is not False:
                return found
    return found or False
