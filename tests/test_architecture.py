"""The layer rules of docs/extending.md, checked on the source: imports point one way and no job imports another.

The import graph counts every import, at module level or inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
JOBS = {
    "litforge.jobs.train",
    "litforge.jobs.eval",
    "litforge.jobs.predict",
    "litforge.jobs.export",
    "litforge.jobs.generate",
    "litforge.jobs.prepare",
}
# above the jobs: only they may import one (cli.command: the `litforge` command, which hands its job to cli.main;
# litforge.testing: the contract kit, which runs the jobs as a user's own tests do)
ENTRY = {
    "litforge.cli.main",
    "litforge.cli.preflight",
    "litforge.cli.help",
    "litforge.cli.command",
    "litforge.__main__",
    # the contract kit drives what `litforge train` builds and the predict/export jobs, as a user's tests would
    "litforge.testing",
    "litforge.testing.checks",
    "litforge.testing.compose",
    "litforge.testing.ddp",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                deps.add(base)
                deps.update(f"{base}.{alias.name}" for alias in node.names)
        deps = {d for d in deps if d in files and d != name}
        # `from litforge.runtime import compat` also imports the package `litforge.runtime`, whose __init__ holds only
        # a docstring: keep the module, drop the package it came through
        graph[name] = {d for d in deps if not any(other.startswith(d + ".") for other in deps)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "litforge.tasks.restore" in graph["litforge.jobs.eval"]  # module level
    assert "litforge.runtime.devices" in graph["litforge.jobs.checks"]  # inside check_tuning()


def test_no_import_cycle_anywhere_in_src():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_job_imports_another_job_and_only_the_cli_imports_jobs():
    graph = import_graph()
    for module, deps in graph.items():
        jobs = deps & JOBS
        if module in JOBS:
            assert not jobs, f"job {module} imports job(s) {sorted(jobs)}: move the shared code below the jobs"
        elif module not in ENTRY:
            assert not jobs, f"{module} imports job(s) {sorted(jobs)}: only litforge.cli.main may"


# The floors of litforge, bottom to top (issue #49, "imports show the floors"): a package may import its own modules
# and those of every floor below its own, never a package beside it or above it. checkpointing sits below parallel:
# the strategies write through checkpointing.io, and the sharded-checkpoint format (consolidate.py) is checkpointing's.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("core",),  # errors, bounds, contracts, instantiate: what every floor may use
    ("runtime", "scaffold"),  # facts of the running process; `litforge new`
    ("config", "records", "data", "models"),  # the config check; what a run leaves; datamodules; plain nets
    ("loops",),
    ("checkpointing",),
    ("parallel",),
    ("tasks",),  # LightningModules, and a task rebuilt from a checkpoint (tasks.restore)
    ("callbacks",),
    ("deploy",),
    ("jobs",),
    ("cli",),
    ("testing",),  # the contract kit drives the jobs as a user's tests do
)
#: package -> the litforge packages its modules may import (derived from FLOORS); `litforge` itself, the public API
#: (lazy, PEP 562), and `__main__` (`python -m litforge`) sit above them all
ALLOWED_IMPORTS: dict[str, frozenset[str]] = {
    package: frozenset({package, *(below for lower in FLOORS[:floor] for below in lower)})
    for floor, packages in enumerate(FLOORS)
    for package in packages
}


def package_of(module: str) -> str | None:
    """`litforge.tasks.task` -> `tasks`; None above the packages (`litforge`, `litforge.__main__`) and outside."""
    parts = module.split(".")
    return parts[1] if parts[0] == "litforge" and len(parts) > 1 and parts[1] in ALLOWED_IMPORTS else None


def source_file(module: str) -> Path:
    path = SRC / Path(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"


def imports_off_their_floor(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, import) for each import of a package that its ALLOWED_IMPORTS does not hold."""
    return [
        (module, dep)
        for module, deps in sorted(graph.items())
        if (package := package_of(module)) is not None
        for dep in sorted(deps)
        if (target := package_of(dep)) is not None and target not in ALLOWED_IMPORTS[package]
    ]


def test_every_package_of_litforge_has_its_floor():
    on_disk = {p.name for p in (SRC / "litforge").iterdir() if (p / "__init__.py").exists()}
    on_disk.remove("conf")  # the shipped YAML configs (pkg://litforge.conf): no code, no imports
    assert on_disk == set(ALLOWED_IMPORTS), (
        f"packages without a floor: {sorted(on_disk - set(ALLOWED_IMPORTS))}; "
        f"floors without a package: {sorted(set(ALLOWED_IMPORTS) - on_disk)}"
    )


def test_no_import_runs_up_or_sideways_between_packages():
    """Every import of every module (at module level or in a function) stays within its package's ALLOWED_IMPORTS."""
    off = imports_off_their_floor(import_graph())
    broken = [
        f"{source_file(module).relative_to(SRC)} imports {dep}: {package_of(module)} may import "
        f"{sorted(ALLOWED_IMPORTS[package_of(module) or ''])}"
        for module, dep in off
    ]
    assert not broken, "imports that run up or sideways:\n" + "\n".join(broken)


def test_the_floor_check_names_an_import_from_above_or_beside():
    graph = {
        "litforge.models.cnn": {"litforge.core.errors", "litforge.tasks.task"},  # up
        "litforge.data.base": {"litforge.models.cnn"},  # beside, on the same floor
        "litforge.tasks.task": {"litforge.models.cnn", "litforge.checkpointing.load"},  # down: allowed
        "litforge": {"litforge.jobs.train"},  # the public API, above every package
    }
    assert imports_off_their_floor(graph) == [
        ("litforge.data.base", "litforge.models.cnn"),
        ("litforge.models.cnn", "litforge.tasks.task"),
    ]
    assert "checkpointing" in ALLOWED_IMPORTS["parallel"] and "parallel" not in ALLOWED_IMPORTS["checkpointing"]


def test_models_data_and_the_leaves_keep_their_narrower_rules():
    """models know nothing of Lightning; data uses no runtime module but compat (the one home of library internals:
    data.gym reads gymnasium's TimeLimit count); compat and core are leaves any floor may use."""
    graph = import_graph()
    for module, deps in graph.items():
        if module.startswith("litforge.models"):
            source = (SRC / Path(*module.split("."))).with_suffix(".py")
            source = source if source.exists() else SRC / Path(*module.split(".")) / "__init__.py"
            assert "lightning" not in source.read_text(), f"{module} imports Lightning: a model is a plain nn.Module"
        if module.startswith("litforge.data"):
            assert all(
                d.startswith(("litforge.data", "litforge.core")) or d == "litforge.runtime.compat" for d in deps
            ), (module, deps)
        if module == "litforge.runtime.compat" or module.startswith("litforge.core"):
            assert deps <= {"litforge.core.errors"}, (module, deps)
        if module not in ENTRY:
            assert not deps & ENTRY, f"{module} imports the entry layer {sorted(deps & ENTRY)}"


# An import inside a function is a dependency the reader does not see at the top: it stays only where the torch-free
# command line needs it (--help, the config check, the refusals: tests/test_startup.py, benchmarks/refusal_time.py)
# or where an optional extra is imported on use (runtime/extras.py), and says which on its line.
# A ceiling that only goes down: every local import in src/litforge (issue 49 asked for at most 150), each with its
# reason on the line.
MAX_LOCAL_IMPORTS = 59


def function_local_imports() -> list[tuple[str, int, bool]]:
    """(file, line, whether a comment is on one of its lines) of each import whose nearest scope is a function."""
    found = []
    for path in sorted((SRC / "litforge").rglob("*.py")):
        lines = path.read_text().splitlines()
        scopes: list[tuple[ast.AST, bool]] = [(ast.parse(path.read_text()), False)]
        while scopes:
            node, in_function = scopes.pop()
            for child in ast.iter_child_nodes(node):
                if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                    said = any("#" in line for line in lines[child.lineno - 1 : child.end_lineno])
                    found.append((str(path.relative_to(SRC)), child.lineno, said))
                functions = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                scopes.append((child, in_function or isinstance(child, functions)))
    return found


def test_function_local_imports_are_few_and_each_says_why():
    found = function_local_imports()
    # the walk sees them: `import torch  # torch-free --help` in checkpointing.load.load_checkpoint
    assert any(file == "litforge/checkpointing/load.py" and said for file, _, said in found)
    assert len(found) <= MAX_LOCAL_IMPORTS, f"{len(found)} function-local imports (> {MAX_LOCAL_IMPORTS})"
    silent = [f"{file}:{line}" for file, line, said in found if not said]
    assert not silent, (
        "function-local imports without their reason on the line (import at the top of the module, or say why not, "
        f"e.g. `# torch-free --help`, `# extra [deploy]`): {silent}"
    )


def test_the_five_root_scripts_hand_their_name_to_the_cli():
    root = SRC.parent
    for job in ("train", "eval", "predict", "export", "generate", "prepare"):
        text = (root / f"{job}.py").read_text()
        code = [line for line in text.splitlines() if line.strip() and not line.startswith(('"""', "#"))]
        assert code[-3:] == [
            "from litforge.cli.main import main",
            'if __name__ == "__main__":',
            f'    main("{job}")',
        ], job


def test_a_test_leaving_launch_state_is_caught_and_cleaned_up():
    """The autouse guard of tests/conftest.py: a leaked MASTER_PORT (and a process group) is named and undone."""
    import os

    import torch.distributed as dist

    from conftest import launch_state, launch_state_left_behind

    before = launch_state()
    assert launch_state_left_behind(before) is None
    os.environ["MASTER_PORT"] = "29999" if before["MASTER_PORT"] != "29999" else "29998"
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    problem = launch_state_left_behind(before)
    assert problem is not None and "MASTER_PORT" in problem and "an initialised process group" in problem
    assert os.environ.get("MASTER_PORT") == before["MASTER_PORT"] and not dist.is_initialized()


def _die_on_rank_1(rank: int, world_size: int) -> int:
    """Rank 1 takes SIGUSR1 with no handler installed (its default action ends the process), rank 0 answers."""
    import os
    import signal
    import time

    if rank == 1:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(60)
    return rank


@pytest.mark.distributed
def test_a_gloo_rank_that_dies_is_named_with_its_signal_at_once():
    """tests/gloo.py: a rank that dies under a call (as a pre-emption test's signal sent after the fit restored
    SIGUSR1's default would make it) is reported dead, by its signal, within seconds, not as hung at the timeout."""
    import time

    from gloo import GlooRanks

    pool = GlooRanks(2)
    try:
        start = time.monotonic()
        with pytest.raises(AssertionError, match=r"rank 1 died in _die_on_rank_1 \(killed by SIGUSR1\)"):
            pool.run(_die_on_rank_1, timeout=60)
        assert time.monotonic() - start < 20
    finally:
        pool.close()


def test_only_packages_at_the_top_of_the_package():
    # __main__.py: `python -m litforge`, the `litforge` command (litforge.cli.command) without its script
    top = sorted(p.name for p in (SRC / "litforge").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not top, f"modules at the top of src/litforge: {top}; put each in the package of its role (README, Layout)"


def test_the_readme_layout_names_every_module_of_every_package():
    """The README's Layout block lists, per package, exactly the modules on disk (`name.py` words), no more."""
    import re

    readme = (SRC.parent / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    named: dict[str, set[str]] = {}
    package = None
    for line in block.splitlines():
        if match := re.match(r"^  (\w+)/\s", line):
            package = match.group(1)
            named[package] = set()
        elif not line.startswith("    "):
            package = None
        if package:
            named[package] |= set(re.findall(r"\b(\w+)\.py\b", line))
    on_disk = {
        p.name: {m.stem for m in p.glob("*.py") if m.name != "__init__.py"}
        for p in (SRC / "litforge").iterdir()
        if (p / "__init__.py").exists()
    }
    assert set(named) == set(on_disk), f"packages in README's layout {sorted(named)} vs on disk {sorted(on_disk)}"
    for package, modules in on_disk.items():
        assert named[package] == modules, (
            f"README layout, {package}/: missing {sorted(modules - named[package])}, "
            f"not on disk {sorted(named[package] - modules)}"
        )


# The config check (docs/checks.md): its code, and the typed declarations that code reads. The declarations grow with
# each argument a shipped library class or job takes, as the annotations of litforge's own constructors do (those are
# counted nowhere); the code is what a reader learns to know how a value is judged.
CONFIG_CHECK_CODE = ("config/__init__.py", "config/check.py", "config/source.py", "cli/preflight.py")
CONFIG_CHECK_DECLARATIONS = ("config/library.py", "config/relations.py", "core/bounds.py", "config/settings.py")


def test_the_config_check_code_stays_within_700_lines_and_every_file_of_config_is_counted():
    """The bound of issue #38 on the checking code (raw lines: docstrings, comments and blank lines included), and
    no module of litforge.config outside both lists, so nothing joins the check uncounted."""
    lines = {p: len((SRC / "litforge" / p).read_text().splitlines()) for p in CONFIG_CHECK_CODE}
    assert sum(lines.values()) <= 700, f"the config check's code is {sum(lines.values())} lines (> 700): {lines}"
    in_config = {f"config/{p.name}" for p in (SRC / "litforge" / "config").glob("*.py")}
    assert in_config <= {*CONFIG_CHECK_CODE, *CONFIG_CHECK_DECLARATIONS}, in_config
    assert all((SRC / "litforge" / p).is_file() for p in CONFIG_CHECK_DECLARATIONS)


# Ceilings that only go down, counted by scripts/code_figures.py (issue 49's goals in brackets): a job reading a raw
# config with a default of its own (10), a probe instead of a declared member (60), a parameter typed Any (120), a
# method swapped on a live object outside runtime/compat.py (0), an import from a lower floor to a higher one (0).
FIGURE_CEILINGS = {"cfg.get": 2, "getattr/hasattr": 20, "Any parameters": 29, "method assignments": 0}
FIGURE_CEILINGS |= {"upward imports": 0}


def test_the_seams_figures_stay_at_or_below_their_ceilings():
    spec = importlib.util.spec_from_file_location("code_figures", ROOT / "scripts" / "code_figures.py")
    assert spec is not None and spec.loader is not None
    code_figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code_figures)
    figures = code_figures.figures()
    over = {name: figures[name] for name, ceiling in FIGURE_CEILINGS.items() if figures[name] > ceiling}
    assert not over, f"over their ceilings {FIGURE_CEILINGS}: {over} (python scripts/code_figures.py lists them)"
    assert figures["local imports"] == figures["local imports with reason"]
