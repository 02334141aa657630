"""docs/extending.md runs as written: every command of the page, verbatim, in a fresh environment holding the wheel.

Every code block of the guide that belongs in a file is preceded by `<!-- file: <path> -->` (a path in the project
folder that `litforge new myproject` makes). The slow test turns the page into one bash script, in the page's order:
each ```bash block as written, and for each file block a line that copies the block's text, extracted beforehand,
to its path. Nothing of a command is split or rewritten.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF, ROOT
from installed import build_wheel, fresh_environment
from litforge.core.errors import ConfigError
from litforge.scaffold import TEMPLATE

GUIDE = ROOT / "docs" / "extending.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
PAGE_PART = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w+\n.*?\n```|^```bash\n(?P<bash>.*?)\n```", re.S | re.M)
LANGUAGES = {".py": "python", ".yaml": "yaml"}


def guide_files() -> dict[str, str]:
    """{path in the project folder: content} of every block the guide marks with its file path."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer(GUIDE.read_text()):
        path = match["path"]
        assert path not in files, f"docs/extending.md has two blocks for {path}"
        assert match["lang"] == LANGUAGES[Path(path).suffix], f"{path} is in a ```{match['lang']} block"
        files[path] = match["body"] + "\n"
    return files


def guide_script(files_folder: str) -> str:
    """The page as one bash script: its bash blocks as written, its files copied in where they appear."""
    lines = ["set -euo pipefail", "set -x"]
    for part in PAGE_PART.finditer(GUIDE.read_text()):
        if part["bash"] is not None:
            lines.append(part["bash"])
        else:
            path = shlex.quote(part["path"])
            lines.append(f'mkdir -p "$(dirname {path})" && cp "{files_folder}/"{path} {path}')
    return "\n".join(lines) + "\n"


def guide_commands() -> list[list[str]]:
    """The arguments of every `litforge <job>` command in the guide: in its bash blocks and in its YAML comments."""
    lines = re.findall(r"^(?:# )?litforge (?:train|eval|predict|export) (.*)$", GUIDE.read_text(), re.M)
    return [shlex.split(line, comments=True) for line in lines]


def write_project(folder: Path) -> Path:
    """The project the page builds: `litforge new` plus the page's files."""
    from litforge.scaffold import new_project

    new_project(folder)
    for path, body in guide_files().items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body)
    return folder


# ---- the page itself (fast) -----------------------------------------------------------------------------------------
def test_every_file_mark_heads_one_code_block_and_the_project_is_complete():
    marks = re.findall(r"<!-- file: (\S+) -->", GUIDE.read_text())
    files = guide_files()
    assert marks and sorted(marks) == sorted(files), "a `<!-- file: -->` line without its code block right after it"
    for module in ("tables", "nets", "regression", "strategies", "callbacks", "jsonl", "diabetes_csv"):
        assert f"myproject/{module}.py" in files
    for path, body in files.items():
        if path.endswith(".py"):
            compile(body, path, "exec")
            imported = re.findall(r"^from (litforge\S*) import", body, re.M)
            assert set(imported) <= {"litforge", "litforge.data.tabular"}, f"{path} imports {imported}"
        else:
            OmegaConf.create(body)  # valid YAML
    script = guide_script("/files")
    assert script.count("litforge train") >= 5 and "cd myproject" in script


def test_every_option_the_guide_types_exists_in_its_files_in_the_template_or_in_conf():
    provided = {p for p in guide_files() if p.startswith("conf/")}
    template = {str(p.relative_to(TEMPLATE)).removesuffix(".tmpl") for p in (TEMPLATE / "conf").rglob("*.tmpl")}
    commands = guide_commands()
    assert len(commands) >= 8
    for args in commands:
        for arg in args:
            key, _, value = arg.partition("=")
            if "." in key or key.startswith("-") or not (CONF / key).is_dir():
                continue  # key=value overrides and flags; only group=option picks a file
            for option in value.strip("[]").split(","):
                name = f"conf/{key}/{option}.yaml"
                assert (CONF / key / f"{option}.yaml").exists() or name in provided or name in template, (
                    f"the guide types {key}={option}, which neither conf/, the template nor the guide's files provide"
                )


def test_the_users_options_are_listed_by_help_and_a_typo_in_one_is_one_line(tmp_path: Path, capsys):
    from litforge.cli.help import answer_help
    from litforge.cli.preflight import checked_overrides
    from litforge.cli.project import find_project

    root = write_project(tmp_path / "myproject")
    project = find_project(root / "myproject")  # from a folder below the project's top
    assert project is not None and project.conf_dir == root / "conf"
    with pytest.raises(SystemExit):
        answer_help("train", CONF, ["--help"], command="litforge train", project=project)
    out = capsys.readouterr().out
    data_line = next(line for line in out.splitlines() if line.strip().startswith("data "))
    assert {"my_csv", "jsonl", "stripes*", "csv"} <= set(data_line.replace(",", " ").split()), data_line
    assert out.startswith("litforge train [group=option ...]")
    with pytest.raises(ConfigError) as info:
        checked_overrides(
            CONF, "myproject", ["experiment=diabetess", f"paths.log_dir={tmp_path}"], "train", top_dir=root / "conf"
        )
    assert str(info.value).startswith(
        "experiment=diabetess is not an option of experiment; did you mean experiment=diabetes?"
    ), str(info.value)


def test_a_bad_value_of_the_users_own_argument_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import sys

    from litforge.cli.preflight import checked_overrides

    root = write_project(tmp_path / "myproject")
    monkeypatch.syspath_prepend(str(root))  # what `pip install -e .` of the project does
    try:
        with pytest.raises(ConfigError) as info:
            overrides = ["experiment=diabetes", "data.path=d.csv", "data.batch_size=0", f"paths.log_dir={tmp_path}"]
            checked_overrides(CONF, "myproject", overrides, "train", top_dir=root / "conf")
    finally:
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]
    message = str(info.value)
    assert "data.batch_size=0" in message and ">= 1" in message and "\n" not in message, message


def test_a_project_table_that_would_hide_litforges_top_config_is_refused_in_one_line(tmp_path: Path):
    from litforge.cli.project import find_project

    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "train.yaml").write_text("defaults: [train]\n")
    (tmp_path / "pyproject.toml").write_text('[tool.litforge]\n[tool.litforge.configs]\ntrain = "train"\n')
    with pytest.raises(ConfigError, match="would hide litforge's own train.yaml"):
        find_project(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.litforge]\nconf = "configs"\n')
    with pytest.raises(ConfigError, match=r"conf='configs' is not a folder"):
        find_project(tmp_path)


def test_the_new_project_is_lint_clean_and_its_python_compiles(tmp_path: Path):
    import sys

    from litforge.scaffold import new_project

    written = new_project(tmp_path / "my-project")
    assert {"my_project/data.py", "conf/my_project.yaml", ".ci/run", ".gitignore", "tests/test_contracts.py"} <= {
        str(p.relative_to(tmp_path / "my-project")) for p in written
    }
    assert "{{" not in "".join(p.read_text() for p in written)  # every placeholder replaced
    for check in (["check", "--select", "E,F,W,B,I"], ["format", "--check"]):
        result = subprocess.run([sys.executable, "-m", "ruff", *check, "--line-length", "120", "."],
                                cwd=tmp_path / "my-project", capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(ValueError, match="exists and is not an empty folder"):
        new_project(tmp_path / "my-project")


class RegressionTask:  # stands for a task of the user's own, outside litforge.tasks
    pass


def test_a_checkpoint_of_a_task_outside_litforge_resumes_into_the_same_class():
    from litforge.checkpointing.training import check_resumable
    from litforge.tasks.task import CHECKPOINT_KEY

    net = {"_target_": "myproject.nets.TabularMLP", "_partial_": True, "hidden": 64}
    name = f"{RegressionTask.__module__}.{RegressionTask.__qualname__}"
    check_resumable(
        {CHECKPOINT_KEY: {"task_class": name}, "hyper_parameters": {"net": net}}, "a.ckpt", RegressionTask, net
    )
    with pytest.raises(ConfigError, match="was written by task OtherTask, but this run configures RegressionTask"):
        check_resumable({CHECKPOINT_KEY: {"task_class": "myproject.tasks.OtherTask"}}, "a.ckpt", RegressionTask, net)


# ---- the page, run as written ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.distributed  # strategy=ddp_bf16 with trainer.devices=2: Lightning starts a second process
def test_every_command_of_the_page_runs_as_written(tmp_path: Path):
    files = tmp_path / "files"
    for path, body in guide_files().items():
        (files / path).parent.mkdir(parents=True, exist_ok=True)
        (files / path).write_text(body)
    env = fresh_environment(tmp_path / "venv", build_wheel(tmp_path / "dist"))
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(["bash", "-c", guide_script(str(files))], cwd=work, env=env, capture_output=True,
                            text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-5000:])

    logs = work / "myproject" / "logs"

    def metrics(task_name: str) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((logs / task_name).glob("runs/*/metrics.json"))]

    (stripes,) = metrics("myproject")  # the new project's own run
    assert stripes["metrics"]["test/acc"] > 0.9
    assert all(math.isfinite(m["metrics"]["test/mae"]) for m in metrics("diabetes_regression"))  # csv and jsonl
    predictions = next((logs / "predict").rglob("predictions.csv")).read_text().splitlines()
    assert len(predictions) == 1 + 442  # every row of the CSV file
    assert next((logs / "export").rglob("model.onnx"))
    recipe_runs = metrics("diabetes")  # the page's dataset, net and task: then with its strategy and callback
    assert len(recipe_runs) == 2 and recipe_runs[-1]["metrics"]["train/grad_norm_max"] > 0
    ddp_log = sorted((logs / "diabetes").glob("runs/*/diabetes.log"))[-1].read_text()
    assert "DDP gradients are all-reduced in bf16 across 2 processes" in ddp_log
    evaluated = [json.loads(p.read_text()) for p in (logs / "eval").glob("runs/*/metrics.json")]
    assert len(evaluated) == 2 and all(math.isfinite(e["metrics"]["test/mae"]) for e in evaluated)
