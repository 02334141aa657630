"""The layer rules of docs/extending.md, checked on the source: imports point one way and no job imports another.

The import graph counts every import, at module level or inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
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
    assert "litforge.loops.steps_per_call" in graph["litforge.jobs.build"]  # inside build_fit_trainer()


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


def test_lower_layers_do_not_reach_up():
    """models know nothing of tasks or Lightning; data stands alone (but for the leaf compat); nothing below the CLI
    imports it."""
    graph = import_graph()
    for module, deps in graph.items():
        if module.startswith("litforge.models"):
            assert not {d for d in deps if d.startswith(("litforge.tasks", "litforge.callbacks", "litforge.data"))}, (
                module
            )
            source = (SRC / Path(*module.split("."))).with_suffix(".py")
            source = source if source.exists() else SRC / Path(*module.split(".")) / "__init__.py"
            assert "lightning" not in source.read_text(), f"{module} imports Lightning: a model is a plain nn.Module"
        if module.startswith("litforge.data"):
            # compat may be used: it is the one home of library internals (data.gym: gymnasium's TimeLimit count)
            assert all(
                d.startswith(("litforge.data", "litforge.core")) or d == "litforge.runtime.compat" for d in deps
            ), (module, deps)
        if module == "litforge.runtime.compat" or module.startswith("litforge.core"):  # leaves: any layer may use them
            assert deps <= {"litforge.core.errors"}, (module, deps)
        if module not in ENTRY:
            assert not deps & ENTRY, f"{module} imports the entry layer {sorted(deps & ENTRY)}"


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
CONFIG_CHECK_DECLARATIONS = ("config/library.py", "config/relations.py", "core/bounds.py", "jobs/settings.py")


def test_the_config_check_code_stays_within_700_lines_and_every_file_of_config_is_counted():
    """The bound of issue #38 on the checking code (raw lines: docstrings, comments and blank lines included), and
    no module of litforge.config outside both lists, so nothing joins the check uncounted."""
    lines = {p: len((SRC / "litforge" / p).read_text().splitlines()) for p in CONFIG_CHECK_CODE}
    assert sum(lines.values()) <= 700, f"the config check's code is {sum(lines.values())} lines (> 700): {lines}"
    in_config = {f"config/{p.name}" for p in (SRC / "litforge" / "config").glob("*.py")}
    assert in_config <= {*CONFIG_CHECK_CODE, *CONFIG_CHECK_DECLARATIONS}, in_config
    assert all((SRC / "litforge" / p).is_file() for p in CONFIG_CHECK_DECLARATIONS)
