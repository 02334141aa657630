"""The docs must not rot: README.md stays short, and every link, `litforge.<name>` and `python <script>.py` in the
Markdown pages points at something that exists.

Fast and torch-free on purpose (it reads files only): a `litforge.x.y.Name` is resolved with importlib's finders
for the module part (locating a module, not importing it) and the module's syntax tree for the attribute part, so
checking every name costs milliseconds instead of importing torch and Lightning.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_README_LINES = 300
# written by another change at the same time; a link to it may land first
NOT_YET_WRITTEN = {ROOT / "docs" / "checks.md", ROOT / "docs" / "api.md"}

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
LITFORGE_NAME = re.compile(r"(?<![\w./-])litforge(?:\.[A-Za-z_]\w*)+")
SCRIPT = re.compile(r"\bpython3?\s+((?:[\w.-]+/)*[\w.-]+\.py)\b")


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "benchmarks" / "README.md"]


def _prose(text: str) -> str:
    """The text without fenced code blocks or inline code: what renders as Markdown (and so holds links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_anchor(match.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(path: Path) -> list[str]:
    """Relative links of `path` whose file (or `#heading` in it) does not exist; http(s) and pure #anchors skipped."""
    problems = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http(s)://, mailto:, ... and anchors within the page
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve()
        if not resolved.exists():
            if resolved not in NOT_YET_WRITTEN:
                problems.append(f"{target}: no such file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: {resolved.name} has no heading with the anchor #{anchor}")
    return problems


def litforge_names(path: Path) -> list[str]:
    """Every dotted `litforge.<name>` in backticks: inline code and fenced code blocks."""
    text = path.read_text(encoding="utf-8")
    code = [block.group(0) for block in FENCE.finditer(text)]
    code += [span for _, span in INLINE_CODE.findall(FENCE.sub("", text))]
    return [name for block in code for name in LITFORGE_NAME.findall(block)]


def _top_level_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names defined at the top of a module or class body (also inside top-level if/try blocks).

    Imported names do not count: `litforge.jobs.eval.load_for_inference` exists at run time only because eval imports it
    from litforge.tasks.restore, and docs must name the module where a thing lives.
    """
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
            for block in blocks:
                names.update(_top_level_names(block))
    return names


def _locate(parts: list[str]) -> tuple[object | None, int]:
    """The spec of the longest module prefix of `parts` and its length, found without importing anything.

    `importlib.util.find_spec("a.b.c")` would import `a.b` (and so torch); walking the packages' search paths with
    `PathFinder` does not.
    """
    spec = importlib.util.find_spec(parts[0])
    depth = 1
    while spec is not None and depth < len(parts) and spec.submodule_search_locations:
        sub = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), spec.submodule_search_locations)
        if sub is None:
            break
        spec, depth = sub, depth + 1
    return spec, depth


def resolve(name: str) -> str | None:
    """None if `name` is a module or an attribute (class, function, constant, method) of one; else why not. A moved
    path (litforge.MOVED_FROM, MOVED_MODULES: it still imports, with a warning) is looked up in its new home."""
    import litforge

    if name in litforge.MOVED_FROM:
        return resolve(f"{litforge.MOVED_FROM[name]}.{name.rsplit('.', 1)[1]}")
    old = next((m for m in litforge.MOVED_MODULES if name == m or name.startswith(f"{m}.")), None)
    if old is not None:
        return resolve(litforge.MOVED_MODULES[old] + name[len(old) :])
    parts = name.split(".")
    spec, depth = _locate(parts)
    if spec is None:
        return f"no module {parts[0]}"
    module, rest = ".".join(parts[:depth]), parts[depth:]
    if not rest:
        return None
    if not spec.origin or not spec.origin.endswith(".py"):
        return f"{module} has no Python source to look up {'.'.join(rest)} in"
    scope = _top_level_names(ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body)
    for i, attr in enumerate(rest):
        node = scope.get(attr)
        if node is None:
            return f"{'.'.join([module, *rest[:i]])} has no attribute {attr!r} (no module {module}.{attr} either)"
        if i + 1 < len(rest):
            if not isinstance(node, ast.ClassDef):
                return f"{'.'.join([module, *rest[: i + 1]])} is not a class: cannot look up {rest[i + 1]!r}"
            scope = _top_level_names(node.body)
    return None


def missing_scripts(path: Path, root: Path = ROOT) -> list[str]:
    """`python <x>.py` commands (run from the repository root) whose script does not exist.

    A script the page itself writes out (a `<!-- file: x.py -->` block, as docs/extending.md does for a user's own
    project) counts as existing."""
    text = path.read_text(encoding="utf-8")
    written = set(re.findall(r"<!-- file: (\S+) -->", text))
    return [s for s in SCRIPT.findall(text) if not (root / s).is_file() and s not in written]


# ---- the checks ----------------------------------------------------------------------------------------------------
def test_readme_fits():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move the details into a docs/ page and link it"
    )


def test_readme_keeps_the_test_command_ci_runs():
    assert '```bash\npip install -e ".[dev]" && pytest\n```' in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(path: Path):
    assert path.is_file(), path
    assert broken_links(path) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_litforge_names_in_backticks_resolve(path: Path):
    unresolved = {name: why for name in litforge_names(path) if (why := resolve(name))}
    assert unresolved == {}, f"{path.name}: names that moved or never existed: grep for them and fix the docs"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_commands_name_scripts_that_exist(path: Path):
    assert missing_scripts(path) == []


def test_the_pages_are_scanned_at_all():
    """A scanner that matched nothing would pass everything: the real pages hold many of each kind."""
    files = doc_files()
    assert sum(len(LINK.findall(_prose(p.read_text(encoding="utf-8")))) for p in files) > 30
    assert sum(len(litforge_names(p)) for p in files) > 30
    assert sum(len(SCRIPT.findall(p.read_text(encoding="utf-8"))) for p in files) > 50


def test_each_check_catches_a_mistake(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A title: `with_code.py`\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/there.md) [ok anchor](docs/there.md#a-title-with_codepy) [web](https://example.com) [top](#x)\n"
        "[gone](docs/gone.md) [bad anchor](docs/there.md#nope) `[not a link](docs/in_code.md)`\n"
        "```\n[in a fence](docs/fenced.md)\n```\n"
        "`litforge.tasks.restore.load_for_inference` "
        "`litforge.tasks.classification.ClassificationTask.step_loss`\n"
        "`litforge.jobs.eval.load_for_inference` `litforge.no_such_module` `litforge.cli.main.CONF_DIR.parent`\n"
        "python train.py, python benchmarks/gone.py\n"
    )
    (tmp_path / "train.py").write_text("")
    assert broken_links(page) == [
        f"docs/gone.md: no such file {tmp_path / 'docs' / 'gone.md'}",
        "docs/there.md#nope: there.md has no heading with the anchor #nope",
    ]
    names = litforge_names(page)
    assert [n for n in names if resolve(n)] == [
        "litforge.jobs.eval.load_for_inference",
        "litforge.no_such_module",
        "litforge.cli.main.CONF_DIR.parent",
    ]
    assert missing_scripts(page, root=tmp_path) == ["benchmarks/gone.py"]


# ---- docs/testing.md: every test file, and the suite's size --------------------------------------------------------
TEST_COUNT = re.compile(r"^(\d[\d,]*) tests\b", re.M)


def test_the_testing_page_names_every_test_file_and_no_other():
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    table = page.split("## What each file proves", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`(test_\w+\.py)`", table))
    on_disk = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert named == on_disk, f"docs/testing.md: add {sorted(on_disk - named)}, drop {sorted(named - on_disk)}"


def collected_test_count(session: pytest.Session) -> int:
    """The suite's size as pytest collects it: this session's items when it collected every test file (the whole
    suite, as CI runs it), else a collection of its own in a subprocess."""
    import subprocess
    import sys

    files = {Path(str(item.fspath)).name for item in session.items}
    if files >= {p.name for p in (ROOT / "tests").glob("test_*.py")}:
        return len(session.items)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return int(re.search(r"^(\d+) tests? collected", out, re.M).group(1))


@pytest.mark.slow
def test_the_testing_page_states_the_suites_current_size(request: pytest.FixtureRequest):
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    stated = TEST_COUNT.search(page)
    assert stated, "docs/testing.md: the 'How long it takes' section opens with '<N> tests.'"
    count = collected_test_count(request.session)
    assert int(stated.group(1).replace(",", "")) == count, (
        f"docs/testing.md says {stated.group(1)} tests; pytest collects {count}"
    )


# ---- reference, not history; nothing outside the repository ---------------------------------------------------------
HISTORY = re.compile(
    r"\bthis stop\b|\blast stop\b|\bstop \d+\b|\b[Ii]ssue \d+(?:'s| goal)|\(issue \d+\)|\(([0-9a-f]{7,12})\)"
)
OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])shared/(?:LESSONS|DESIGN)\.md")


def tracked_text_files() -> list[Path]:
    import subprocess

    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    kept = (".md", ".py", ".yaml", ".yml", ".toml", ".ipynb", ".cfg", ".txt")
    return [ROOT / n for n in names if n.endswith(kept) or n == ".ci/run"]


def test_no_project_file_points_outside_the_repository():
    this = Path(__file__).resolve()
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in tracked_text_files()
        if p.resolve() != this and p.is_file()
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == [], "state the fact or link its public source instead: " + ", ".join(offenders)


def test_reference_docs_hold_no_history():
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {m.group(0)}"
        for p in doc_files()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if (m := HISTORY.search(line))
    ]
    assert offenders == [], "docs are reference (git keeps history): " + "; ".join(offenders)


def test_the_history_and_path_patterns_catch_what_they_are_for():
    for line in ("Cut this stop: ...", "(before issue 17's cuts)", "the tree before (cbd0c29)", "stop 26 landed"):
        assert HISTORY.search(line), line
    for line in ("Lightning issue 21487 (open)", "Lightning-AI/pytorch-lightning#17517", "sha 19f6269e..."):
        assert not HISTORY.search(line), line
    assert OUTSIDE.search("see ../shared/LESSONS.md") and not OUTSIDE.search("a shared/ folder")


# ---- claims that cite a test: the file and the test exist -----------------------------------------------------------
# `tests/test_x.py`, `test_x.py::test_name[params]`, `tests/faults.py`; a trailing `_` cites every test of that prefix
CITED_FILE = re.compile(r"(?<![\w/.-])(?:tests/)?((?:test_\w+|\w+)\.py)((?:::\w+)*)")
# a test cited by its name alone: in backticks, `test_` and at least three more words (shorter `test_x` names in the
# docs are config keys and Lightning hooks: `test_after_training`, `test_step`)
CITED_NAME = re.compile(r"`(test(?:_[a-z0-9]+){3,})(?:\[[^\]`]*\])?`")


def functions_in_tests(root: Path = ROOT) -> dict[str, set[str]]:
    """Each tests/*.py file's functions, methods and classes, by name (from the syntax tree: nothing imported)."""
    found: dict[str, set[str]] = {}
    for path in (root / "tests").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found[path.name] = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
    return found


def cited_tests(path: Path) -> list[tuple[str, str | None]]:
    """(file or None, test name or None) for every citation of a test on the page: `test_x.py::test_y`,
    `tests/test_x.py`, `tests/helper.py` (only under tests/), and `test_y` alone in backticks."""
    text = path.read_text(encoding="utf-8")
    cited: list[tuple[str, str | None]] = []
    for match in CITED_FILE.finditer(text):
        name, parts = match.group(1), [p for p in match.group(2).split("::") if p]
        if not (name.startswith("test_") or match.group(0).startswith("tests/")):
            continue  # train.py, benchmarks/x.py: the script checks cover them
        cited.append((name, parts[0] if parts else None))
    cited += [(None, name) for name in CITED_NAME.findall(text)]
    return cited


def uncited(path: Path, functions: dict[str, set[str]]) -> list[str]:
    """The citations on `path` whose file or test does not exist."""
    every = set().union(*functions.values())

    def exists(name: str, where: set[str]) -> bool:
        return name in where or (name.endswith("_") and any(f.startswith(name) for f in where))

    problems = []
    for file, test in cited_tests(path):
        if file is not None and file not in functions:
            problems.append(f"tests/{file}: no such file")
        elif test is not None and not exists(test, functions[file] if file else every):
            problems.append(f"{file + '::' if file else ''}{test}: no such test")
    return sorted(set(problems))


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_a_page_cites_exists(path: Path, suite_functions: dict[str, set[str]]):
    """A claim that names a test as its proof must name one that exists: a renamed or deleted test leaves the claim
    standing with no proof behind it."""
    assert uncited(path, suite_functions) == [], f"{path.name}: cited tests that do not exist"


@pytest.fixture(scope="module")
def suite_functions() -> dict[str, set[str]]:
    return functions_in_tests()  # parsing every test file once, not once per page


def test_the_citation_check_finds_citations_and_catches_a_missing_test(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "def test_one_two_three():\n    pass\ndef test_time_limit_x(): pass\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "Proof: `tests/test_a.py::test_one_two_three[x,y]`, `test_a.py::test_time_limit_`, `test_one_two_three`,\n"
        "`test_after_training` (a config key), python train.py, `tests/test_gone.py`, `test_a.py::test_gone`,\n"
        "`test_no_such_test_here`, `tests/helper.py`.\n"
    )
    assert uncited(page, functions_in_tests(tmp_path)) == [
        "test_a.py::test_gone: no such test",
        "test_no_such_test_here: no such test",
        "tests/helper.py: no such file",
        "tests/test_gone.py: no such file",
    ]
    assert sum(len(cited_tests(p)) for p in doc_files()) > 100, "the real pages cite many tests"


# ---- figures a test pins: the docs state the value the test reads ---------------------------------------------------
def pinned_figures() -> list[tuple[Path, str]]:
    """(page, sentence) pairs: each page must hold its sentence, written from tests/budgets.py's constants, so a
    budget changed in the test is a docs test failure until the docs say it too."""
    import budgets as b

    performance, benchmarks = ROOT / "docs" / "performance.md", ROOT / "benchmarks" / "README.md"
    return [
        (
            performance,
            f"`tests/test_speed.py` fails if the default run exceeds {b.CALLS_PER_STEP_BUDGET:,} Python calls per "
            f"step or `steps_per_call=8` exceeds {b.STEPS_PER_CALL_BUDGET}",
        ),
        (
            performance,
            f"makes {b.MEASURED_STEPS_PER_CALL_8:,} instead of {b.MEASURED_CALLS_PER_STEP:,} Python calls per "
            "optimizer step",
        ),
        (
            benchmarks,
            f"the test suite pins the default run under {b.CALLS_PER_STEP_BUDGET:,} calls per step and "
            f"`steps_per_call=8` under {b.STEPS_PER_CALL_BUDGET}",
        ),
        (benchmarks, f"{b.MEASURED_CALLS_PER_STEP:,} and {b.MEASURED_STEPS_PER_CALL_8:,})"),
    ]


def test_the_docs_state_the_figures_the_tests_pin():
    import budgets

    assert budgets.MEASURED_CALLS_PER_STEP < budgets.CALLS_PER_STEP_BUDGET < budgets.USUAL_DEFAULTS
    assert budgets.MEASURED_STEPS_PER_CALL_8 < budgets.STEPS_PER_CALL_BUDGET
    assert budgets.MEASURED_CALLS_PER_EPOCH_BOUNDARY < budgets.CALLS_PER_EPOCH_BOUNDARY_BUDGET
    missing = [
        f"{page.relative_to(ROOT)}: {sentence!r}"
        for page, sentence in pinned_figures()
        if sentence not in " ".join(page.read_text(encoding="utf-8").split())
    ]
    assert missing == [], "state the figures of tests/budgets.py: " + "; ".join(missing)
