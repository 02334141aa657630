"""docs/extending.md runs as written: its files are copied out of the page and trained through the real CLI.

Every code block of the guide that belongs in a file is preceded by `<!-- file: <path> -->`; the tests write
exactly those blocks into a temporary folder, put it on PYTHONPATH and its conf folder on Hydra's search path, and
train all five examples (dataset, net, task, strategy, callback) in one run of a few steps.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF, ROOT, read_metrics, run_cli, run_dirs, single_run
from litforge.core.errors import ConfigError

GUIDE = ROOT / "docs" / "extending.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
LANGUAGES = {".py": "python", ".yaml": "yaml"}


def guide_files() -> dict[str, str]:
    """{path: content} of every block the guide marks with its file path."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer(GUIDE.read_text()):
        path = match["path"]
        assert path not in files, f"docs/extending.md has two blocks for {path}"
        assert match["lang"] == LANGUAGES[Path(path).suffix], f"{path} is in a ```{match['lang']} block"
        files[path] = match["body"] + "\n"
    return files


def write_project(folder: Path) -> Path:
    for path, body in guide_files().items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    return folder


def guide_commands() -> list[list[str]]:
    """The arguments of every `train.py` command in the guide: in its bash blocks and in its YAML comments."""
    text = GUIDE.read_text().replace("\\\n", " ")
    lines = re.findall(r"^(?:# )?python \S*train\.py (.*)$", text, re.M)
    return [shlex.split(line.replace("$PWD", "/here")) for line in lines]


def with_project_on_path(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}


# ---- the page itself (fast) -----------------------------------------------------------------------------------------
def test_every_file_mark_heads_one_code_block_and_the_package_is_complete():
    marks = re.findall(r"<!-- file: (\S+) -->", GUIDE.read_text())
    files = guide_files()
    assert marks and sorted(marks) == sorted(files), "a `<!-- file: -->` line without its code block right after it"
    for module in ("__init__", "data", "models", "tasks", "strategies", "callbacks"):
        assert f"myproject/{module}.py" in files
    for path, body in files.items():
        if path.endswith(".py"):
            compile(body, path, "exec")
        else:
            OmegaConf.create(body)  # valid YAML


def test_every_option_the_guide_types_exists_in_its_files_or_in_conf():
    provided = {p for p in guide_files() if p.startswith("myproject/conf/")}
    commands = guide_commands()
    assert len(commands) >= 6
    for args in commands:
        for arg in args:
            key, _, value = arg.partition("=")
            if "." in key or key.startswith("-") or not (CONF / key).is_dir():
                continue  # key=value overrides and flags; only group=option picks a file
            for option in value.strip("[]").split(","):
                assert (CONF / key / f"{option}.yaml").exists() or f"myproject/conf/{key}/{option}.yaml" in provided, (
                    f"the guide types {key}={option}, which neither conf/ nor the guide's files provide"
                )


def test_the_users_options_are_listed_by_help_and_a_typo_in_one_is_one_line(tmp_path: Path, capsys):
    from litforge.cli.help import answer_help
    from litforge.cli.preflight import checked_overrides

    root = write_project(tmp_path / "project")
    searchpath = f"hydra.searchpath=[file://{root}/myproject/conf]"
    with pytest.raises(SystemExit):
        answer_help("train", CONF, [searchpath, "--help"])
    data_line = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("data "))
    assert "csv" in data_line.split() or "csv," in data_line, data_line  # the user's option beside litforge's
    with pytest.raises(ConfigError) as info:
        checked_overrides(CONF, "train", [searchpath, "experiment=diabetess", f"paths.log_dir={tmp_path}"])
    assert str(info.value).startswith(
        "experiment=diabetess is not an option of experiment; did you mean experiment=diabetes?"
    ), str(info.value)


class RegressionTask:  # stands for a task of the user's own, outside litforge.tasks
    pass


def test_a_checkpoint_of_a_task_outside_litforge_resumes_into_the_same_class():
    from litforge.jobs.train import check_resumable
    from litforge.tasks.base import CHECKPOINT_KEY

    net = {"_target_": "myproject.models.TabularMLP", "_partial_": True, "hidden": 64}
    cfg = OmegaConf.create({"model": net})
    name = f"{RegressionTask.__module__}.{RegressionTask.__qualname__}"
    check_resumable(
        {CHECKPOINT_KEY: {"task_class": name}, "hyper_parameters": {"net": net}}, "a.ckpt", RegressionTask, cfg
    )
    with pytest.raises(ConfigError, match="was written by task OtherTask, but this run configures RegressionTask"):
        check_resumable({CHECKPOINT_KEY: {"task_class": "myproject.tasks.OtherTask"}}, "a.ckpt", RegressionTask, cfg)


# ---- the examples, trained through the CLI --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.distributed  # strategy=ddp_bf16 with trainer.devices=2: Lightning starts a second process
def test_the_guide_trains_its_dataset_net_task_strategy_and_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import torch

    root = write_project(tmp_path / "project")
    csv = tmp_path / "diabetes.csv"
    subprocess.run([sys.executable, str(root / "myproject" / "diabetes_csv.py"), str(csv)], check=True, timeout=120)
    header = csv.read_text().splitlines()[0].split(",")

    result = run_cli(
        "train.py",
        f"hydra.searchpath=[file://{root}/myproject/conf]",
        "experiment=diabetes",
        f"data.path={csv}",
        "strategy=ddp_bf16",
        "trainer.devices=2",
        "callbacks=[default,grad_norm]",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "print_config=false",
        "callbacks.progress_bar=null",
        "callbacks.tensorboard_extras.model_graph=false",
        log_dir=tmp_path / "logs",
        env=with_project_on_path(root),
    )
    assert result.returncode == 0, result.output[-4000:]
    run = single_run(tmp_path / "logs", task_name="diabetes")  # the recipe's task_name
    metrics = read_metrics(run)

    # the task: its metrics, and its objective picked the best checkpoint
    assert metrics["objective"]["metric"] == "val/mae" and math.isfinite(metrics["objective"]["value"])
    assert math.isfinite(metrics["metrics"]["test/mae"])
    # the callback and the strategy
    assert metrics["metrics"]["train/grad_norm_max"] > 0
    job_log = (run / "diabetes.log").read_text()  # <task_name>.log
    assert "DDP gradients are all-reduced in bf16 across 2 processes" in job_log

    # the dataset's shape facts sized the net, and the hyperparameters are plain data (weights_only loads them)
    best = metrics["best_checkpoint"]
    checkpoint = torch.load(best, weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert hparams["num_features"] == len(header) - 1 and hparams["feature_names"] == header[:-1]
    assert hparams["net"]["_target_"] == "myproject.models.TabularMLP"
    assert checkpoint["state_dict"]["net.body.0.weight"].shape == (hparams["net"]["hidden"], len(header) - 1)

    # eval.py rebuilds the user's task and datamodule from the file once their package is trusted, and not before
    args = (f"ckpt_path={best}", "print_config=false")
    refused = run_cli("eval.py", *args, log_dir=tmp_path / "logs", env=with_project_on_path(root))
    assert refused.returncode == 1 and "Traceback" not in refused.output, refused.output[-3000:]
    refusal = "if myproject is your own package and the file is yours, trust it: trusted_packages=[myproject]"
    assert refusal in refused.output, refused.output[-3000:]
    evaluated = run_cli(
        "eval.py", *args, "trusted_packages=[myproject]", log_dir=tmp_path / "logs", env=with_project_on_path(root)
    )
    assert evaluated.returncode == 0, evaluated.output[-3000:]
    assert math.isfinite(read_metrics(run_dirs(tmp_path / "logs", "eval")[-1])["metrics"]["test/mae"])

    # "RegressionTask.load_from_checkpoint(path) needs nothing but the file"
    monkeypatch.syspath_prepend(str(root))
    try:
        from myproject.tasks import RegressionTask as UserTask

        task = UserTask.load_from_checkpoint(best).eval()
        assert task(torch.zeros(3, len(header) - 1)).shape == (3, 1)
    finally:
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]


@pytest.mark.slow
def test_the_guide_top_config_composes_litforge_and_the_project(tmp_path: Path):
    root = write_project(tmp_path / "project")
    flags = ("--config-dir", str(root / "myproject" / "conf"), "--config-name", "myproject", "--cfg", "job")
    result = run_cli(
        "train.py",
        "data.path=diabetes.csv",
        log_dir=tmp_path / "logs",
        extra_args=flags,
        env=with_project_on_path(root),
    )
    assert result.returncode == 0, result.output[-3000:]
    cfg = OmegaConf.create(result.stdout)
    assert cfg.task._target_ == "myproject.tasks.RegressionTask" and cfg.data.target == "progression"
    assert cfg.optimizer._target_ == "torch.optim.AdamW"  # litforge's defaults underneath
