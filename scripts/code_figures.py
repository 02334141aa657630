"""The figures of issue 49 ("Seams"), counted on the source as text and syntax trees: `python scripts/code_figures.py`.

What each counts:
- lines: every line of src/litforge/**/*.py (`wc -l`);
- cfg.get: occurrences of `cfg.get(` (a job reading a raw config with a default of its own);
- getattr/hasattr: calls of either (a probe instead of a declared member);
- Any parameters: function parameters annotated `Any` (bare, not inside another type);
- local imports: import statements inside a function body; `with reason`: those with a `#` comment on their line;
- method assignments: `obj.<name> = ...` or `setattr(obj, ...)` outside runtime/compat.py whose value is a lambda,
  a functools.partial, a types.MethodType, or whose name is a step/forward/loader hook (forward, *_step,
  *_dataloader, resize_): a method swapped on a live object;
- upward imports: imports (any level) from a package of litforge to one above it in LAYERS.
tests/test_architecture.py holds the source to these figures as ceilings that only go down.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "litforge"
# bottom to top, as tests/test_architecture.py's FLOORS: a package may import the ones below it
LAYERS = [
    ("core",),
    ("runtime", "scaffold"),
    ("config", "records", "data", "models"),
    ("loops",),
    ("checkpointing",),
    ("parallel",),
    ("tasks",),
    ("callbacks",),
    ("deploy",),
    ("jobs",),
    ("cli",),
    ("testing",),
]
HOOK = re.compile(r"^(forward|\w+_step|\w+_dataloader|resize_)$")


def _files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _layer(package: str) -> int | None:
    return next((i for i, names in enumerate(LAYERS) if package in names), None)


def _package(path: Path) -> str | None:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else None


def _is_swap(value: ast.expr) -> bool:
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Call):
        name = ast.unparse(value.func)
        return name in ("functools.partial", "partial", "types.MethodType", "MethodType")
    return False


def upward_imports() -> list[str]:
    found = []
    for path in _files():
        me = _package(path)
        if me is None or _layer(me) is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = _names(node)
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "litforge" and len(parts) > 1:
                    other = _layer(parts[1])
                    if other is not None and other > _layer(me):  # type: ignore[operator]
                        found.append(f"{path.relative_to(SRC)}:{node.lineno} {me} -> {name}")
    return found


def _names(node: ast.ImportFrom) -> list[str]:
    if node.module == "litforge":
        return [node.module, *(f"litforge.{alias.name}" for alias in node.names)]
    return [node.module or ""]


def _any_parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return sum(1 for a in every if a is not None and a.annotation is not None and ast.unparse(a.annotation) == "Any")


def _swaps(node: ast.AST, compat: bool) -> int:
    if compat:
        return 0
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
        return int(len(node.args) == 3 and _is_swap(node.args[2]))
    if isinstance(node, ast.Assign):
        return sum(
            1
            for t in node.targets
            if isinstance(t, ast.Attribute)
            and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))
            and (HOOK.match(t.attr) or _is_swap(node.value))
        )
    return 0


def figures() -> dict[str, int]:
    counts = {"lines": 0, "cfg.get": 0, "getattr/hasattr": 0, "Any parameters": 0, "local imports": 0}
    counts |= {"local imports with reason": 0, "method assignments": 0}
    for path in _files():
        text = path.read_text()
        lines = text.splitlines()
        counts["lines"] += len(lines)
        counts["cfg.get"] += text.count("cfg.get(")
        compat = path.relative_to(SRC).as_posix() == "runtime/compat.py"
        local: set[int] = set()  # line numbers: an import in a nested function is counted once
        for node in ast.walk(ast.parse(text)):
            called = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
            if called in ("getattr", "hasattr"):
                counts["getattr/hasattr"] += 1
            counts["method assignments"] += _swaps(node, compat)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                counts["Any parameters"] += _any_parameters(node)
                local |= {n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
        counts["local imports"] += len(local)
        counts["local imports with reason"] += sum("#" in lines[n - 1] for n in local)
    counts["upward imports"] = len(upward_imports())
    return counts


if __name__ == "__main__":
    for name, value in figures().items():
        print(f"{name:28} {value}")
    for line in upward_imports():
        print("  up:", line)
