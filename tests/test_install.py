"""litforge as a library: the built wheel, installed non-editable into a fresh environment, runs a new user's project.

The path CI takes (issue 38): build the wheel, install it into a fresh virtual environment (tests/installed.py),
`litforge new demo`, install demo, and from `demo/` train a tiny run, then eval, predict and export its checkpoint
and run the project's own pytest.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, read_metrics, single_run
from installed import build_wheel, fresh_environment, run

FAST_HELP_FREE_OF_TORCH = "import sys; from litforge.cli.command import main; main(['--help'])"


@pytest.mark.slow
def test_the_wheel_installed_alone_makes_trains_and_tests_a_new_project(tmp_path: Path):
    # the wheel: litforge's code, its configs (package data) and the search-path plugin, and the `litforge` command
    wheel = build_wheel(tmp_path / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {str(p.relative_to(ROOT)) for p in (ROOT / "conf").rglob("*.yaml")}
    assert {f"litforge/{c}" for c in configs} <= names and "litforge/conf/__init__.py" in names
    assert "hydra_plugins/litforge_searchpath/__init__.py" in names
    assert "litforge/scaffold/template/package/data.py.tmpl" in names
    assert not [n for n in names if n.startswith(("tests/", "docs/", "benchmarks/"))]

    env = fresh_environment(tmp_path / "venv", wheel)
    python = str(tmp_path / "venv" / "bin" / "python")
    where = run([python, "-c", "import litforge; print(litforge.__file__)"], cwd=tmp_path, env=env).stdout
    assert where.startswith(str(tmp_path / "venv")), f"litforge imported from {where}, not the installed wheel"
    # any Hydra application composes litforge's configs, from any folder, through the plugin
    compose = (
        "from hydra import compose, initialize\n"
        "with initialize(version_base='1.3', config_path=None):\n"
        "    print(compose('train', overrides=['model=cnn']).model._target_)"
    )
    assert run([python, "-c", compose], cwd=tmp_path, env=env).stdout.strip() == "litforge.models.cnn.CNN"
    usage = run([python, "-c", FAST_HELP_FREE_OF_TORCH + "; assert 'torch' not in sys.modules"], cwd=tmp_path, env=env)
    assert "litforge new <folder>" in usage.stdout and "train" in usage.stdout

    # the user's project: written, installed (non-editable), found from its folder with nothing typed
    run(["litforge", "new", "demo"], cwd=tmp_path, env=env)
    demo = tmp_path / "demo"
    line = tomllib.loads((demo / "pyproject.toml").read_text())["project"]["dependencies"][0]
    assert line == f"litforge[deploy] @ {wheel.as_uri()}", line  # the wheel this environment was installed from
    run(["pip", "install", "-q", str(demo)], cwd=tmp_path, env=env)  # offline: its requirement resolves here
    help_text = run(["litforge", "train", "--help"], cwd=demo, env=env).stdout
    data_line = next(line for line in help_text.splitlines() if line.strip().startswith("data "))
    assert "stripes*" in data_line and "digits" in data_line, data_line  # the project's options beside litforge's
    completion = run(["litforge", "-sc", "query=bash"], cwd=demo, env=env | {"COMP_LINE": "litforge train model="})
    assert {"model=tiny_cnn", "model=cnn"} <= set(completion.stdout.split()), completion.stdout

    tiny = ["data.num_images=150", "trainer.max_epochs=2", "callbacks.progress_bar=null"]
    trained = run(["litforge", "train", *tiny], cwd=demo, env=env)
    run_dir = single_run(demo / "logs", task_name="demo")
    metrics = read_metrics(run_dir)
    assert metrics["metrics"]["test/acc"] > 0.8, metrics  # three classes: chance is 1/3
    best = metrics["best_checkpoint"]
    assert f"best checkpoint:\n{best}" in trained.stdout
    evaluated = run(["litforge", "eval", f"ckpt_path={best}"], cwd=demo, env=env)
    assert "test/acc" in evaluated.stdout
    run(["litforge", "predict", f"ckpt_path={best}"], cwd=demo, env=env)
    (predictions,) = (demo / "logs" / "predict").rglob("predictions.csv")
    assert len(predictions.read_text().splitlines()) == 1 + 30  # a header and the test split's 20 % of 150
    exported = run(["litforge", "export", f"ckpt_path={best}", "quantize=[]"], cwd=demo, env=env)
    assert any(line.endswith("model.onnx") for line in exported.stdout.splitlines()), exported.stdout[-2000:]

    # the project's own tests: its data test, and litforge's contract kit (litforge.testing) on its parts
    tests = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=demo, env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-4000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]


def test_a_new_projects_litforge_requirement_names_what_exists_here(tmp_path: Path):
    """The package index has no litforge: a new project's dependency names the wheel or folder litforge was installed
    from (a direct reference that resolves here), or for an editable clone the version, with the clone in the note."""
    import json
    from urllib.parse import unquote, urlparse

    from packaging.requirements import Requirement

    import litforge
    from litforge.scaffold import litforge_requirement, new_project

    wheel = tmp_path / "litforge-0.2.0-py3-none-any.whl"
    requirement = Requirement(litforge_requirement(json.dumps({"archive_info": {}, "url": wheel.as_uri()}))[0])
    assert requirement.name == "litforge" and requirement.extras == {"deploy"} and requirement.url == wheel.as_uri()
    line, origin = litforge_requirement(json.dumps({"dir_info": {"editable": True}, "url": ROOT.as_uri()}))
    assert Requirement(line).specifier.contains(litforge.__version__) and f"pip install -e {ROOT}" in origin

    new_project(tmp_path / "mine")  # as this environment has litforge: the line parses, and what it names is here
    text = (tmp_path / "mine" / "pyproject.toml").read_text()
    (requirement,) = map(Requirement, tomllib.loads(text)["project"]["dependencies"])
    assert requirement.name == "litforge", requirement
    if requirement.url:
        assert Path(unquote(urlparse(requirement.url).path)).exists(), requirement
    else:
        assert requirement.specifier.contains(litforge.__version__) and "pip install -e " in text, text
        assert Path(text.split("pip install -e ", 1)[1].split()[0]).joinpath("pyproject.toml").is_file(), text


# ---- the `litforge` command itself (fast, in-process) ---------------------------------------------------------------
def test_litforge_help_lists_every_job_and_new(capsys):
    from litforge.cli.command import main
    from litforge.cli.main import JOBS

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and all(f"\n  {job} " in out for job in [*JOBS, "new"]), out


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["tran"], "litforge: error: tran is not a job (train, eval, predict, export, generate, prepare, new): did "
                   "you mean litforge train?"),
        (["model=cnn"], "name the job first, e.g. litforge train model=cnn"),
        (["new"], "usage: litforge new <folder>"),
    ],
)  # fmt: skip
def test_a_command_line_without_a_job_is_one_line(args, line, capsys):
    from litforge.cli.command import main

    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 1 and line in err and len(err.strip().splitlines()) == 1, err


def test_completion_completes_the_job_word(capsys, monkeypatch):
    from litforge.cli.command import main

    monkeypatch.setenv("COMP_LINE", "litforge e")
    main(["-sc", "query=bash"])
    assert capsys.readouterr().out.split() == ["eval", "export"]


# Imported only inside a try that falls back to the standard library, so not a dependency (say why for each):
OPTIONAL_WITH_FALLBACK = {"dotenv": "cli/habits.py reads .env with python-dotenv where installed, else a plain reader"}


def _imports_with_their_place(tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(imported module, where: "top", "function", "type-checking" or "try") for each absolute import."""

    def walk(node: ast.AST, place: str) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from ((alias.name, place) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child.module, place
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from walk(child, "function")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(child, "type-checking" if place == "top" else place)
            elif isinstance(child, ast.Try) and any(
                h.type is not None and re.search(r"\b(ImportError|ModuleNotFoundError)\b", ast.unparse(h.type))
                for h in child.handlers
            ):
                yield from walk(child, "try")
            else:
                yield from walk(child, place)

    yield from walk(tree, "top")


def test_every_third_party_import_is_a_declared_dependency_or_a_guarded_extra():
    """A module the code imports but pyproject does not declare works here (the dev environment has everything) and
    fails on a stranger's base install: pydantic was such a module (the config check imports it on every run, and
    only extras pulled it in). Every import in src/, function-local ones too, must map through the installed
    distributions to a base dependency or an extra; an extra's module must be the one litforge.runtime.extras names
    with that extra, and be imported where a run without it never goes: inside a function (the job refuses the
    feature first, naming the extra), under TYPE_CHECKING, in a try that catches its ImportError, or at the top of a
    module only such places (or a feature that NEEDED_BY guards) import. (Hydra imports every hydra_plugins module
    on every start: an unguarded extra there warned on each run of the base install.)"""
    import importlib.metadata

    from litforge.runtime.extras import EXTRA_OF, NEEDED_BY

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def name(requirement: str) -> str:
        return re.split(r"[<>=!~\[ ;]", requirement)[0].lower().replace("_", "-")

    base = {name(r) for r in project["dependencies"]}
    extras = {g: {name(r) for r in rs} for g, rs in project["optional-dependencies"].items() if g not in ("dev", "all")}
    assert "pydantic" in base, "the config check imports pydantic on every run: it is a base dependency"
    distributions = importlib.metadata.packages_distributions()

    def distribution(module: str) -> set[str]:
        parts = module.split(".")
        if parts[0] == "hydra_plugins":  # a namespace package: the distribution is named by the plugin's module
            return {parts[1].replace("_", "-")}
        return {d.lower().replace("_", "-") for d in distributions.get(parts[0], [])}

    found: list[tuple[str, str, str]] = []  # (importing module, imported module, place)
    for path in (ROOT / "src").rglob("*.py"):
        importer = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts).removesuffix(".__init__")
        found += [(importer, m, place) for m, place in _imports_with_their_place(ast.parse(path.read_text()))]
    guarded_features = {target.rsplit(".", 1)[0] for target in NEEDED_BY if "." in target}
    undeclared, wrong_extra, unguarded = {}, {}, {}
    for importer, module, place in found:
        top = module.split(".")[0]
        if (
            top in sys.stdlib_module_names
            or top in ("__future__", "__main__", "litforge")
            or module.startswith("hydra_plugins.lit")
        ):
            continue
        if top in OPTIONAL_WITH_FALLBACK:
            assert place == "try", f"{importer} imports {module} outside a try that falls back"
            continue
        provided = distribution(module)
        if provided & base:
            continue
        key = next((k for k in EXTRA_OF if module == k or module.startswith(f"{k}.")), None)
        in_extras = {g for g, names in extras.items() if provided & names}
        if not in_extras:
            undeclared.setdefault(module, set()).add(importer)
        elif key is None or EXTRA_OF[key] not in in_extras:
            wrong_extra[module] = (
                f"litforge.runtime.extras.EXTRA_OF names {key and EXTRA_OF[key]}, pyproject {in_extras}"
            )
        elif place == "top" and importer not in guarded_features:
            importers = [(i, p) for i, m, p in found if m == importer]
            if not importers or any(p == "top" and i not in guarded_features for i, p in importers):
                unguarded.setdefault(module, set()).add(importer)
    assert not undeclared, f"imported but neither a base dependency nor an extra in pyproject.toml: {undeclared}"
    assert not wrong_extra, wrong_extra
    assert not unguarded, f"an extra imported where a run without it goes (a base install fails): {unguarded}"
