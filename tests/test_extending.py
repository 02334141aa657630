"""docs/extending.md runs as written: its files are copied out of the page and trained through the real CLI.

Every code block of the guide that belongs in a file is preceded by `<!-- file: <path> -->`; the tests write
exactly those blocks into a temporary folder, put it on PYTHONPATH and its conf folder on Hydra's search path, and
train all five examples (dataset, net, task, strategy, callback) in one run of a few steps.
"""

from __future__ import annotations

import json
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
    return [shlex.split(line.replace("$PWD", "/here"), comments=True) for line in lines]


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
    assert "my_csv" in data_line.replace(",", " ").split(), data_line  # the user's option beside litforge's
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
    # the refused eval's folder (same second, so name order says nothing) holds no metrics
    (scored,) = [run for run in run_dirs(tmp_path / "logs", "eval") if (run / "metrics.json").exists()]
    assert math.isfinite(read_metrics(scored)["metrics"]["test/mae"])

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


# ---- every job on the user's project ------------------------------------------------------------------------------
def project_run(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The guide's project written out, its CSV file, and the overrides of a short run of experiment=diabetes."""
    root = write_project(tmp_path / "project")
    csv_file = tmp_path / "diabetes.csv"
    subprocess.run(
        [sys.executable, str(root / "myproject" / "diabetes_csv.py"), str(csv_file)], check=True, timeout=120
    )
    overrides = [
        f"hydra.searchpath=[file://{root}/myproject/conf]",
        "experiment=diabetes",
        f"data.path={csv_file}",
        "trainer.max_epochs=3",
        "trainer.limit_train_batches=4",
        "print_config=false",
        "callbacks.progress_bar=null",
        "callbacks.early_stopping=null",
    ]
    return root, csv_file, overrides


@pytest.mark.slow
def test_predict_and_export_run_on_the_users_own_task_and_data(tmp_path: Path):
    import onnxruntime as ort
    import torch

    root, csv_file, overrides = project_run(tmp_path)
    env, logs = with_project_on_path(root), tmp_path / "logs"
    trained = run_cli("train.py", *overrides, log_dir=logs, env=env)
    assert trained.returncode == 0, trained.output[-3000:]
    best = read_metrics(single_run(logs, "diabetes"))["best_checkpoint"]
    trust = "trusted_packages=[myproject]"

    predicted = run_cli("predict.py", f"ckpt_path={best}", trust, log_dir=logs, env=env)
    assert predicted.returncode == 0, predicted.output[-3000:]
    lines = (run_dirs(logs, "predict")[-1] / "predictions.csv").read_text().splitlines()
    assert lines[0] == "input,predicted_0,true_predicted_0" and len(lines) == 1 + round(442 * 0.2)  # the test rows

    exported = run_cli("export.py", f"ckpt_path={best}", trust, log_dir=logs, env=env)
    assert exported.returncode == 0, exported.output[-3000:]
    onnx_path = run_dirs(logs, "export")[-1] / "model.onnx"
    assert f"\n{onnx_path}\n" in exported.stdout
    # onnxruntime on standardised rows as the user's datamodule serves them = the user's task on the same rows
    monkeypatch_path = str(root)
    sys.path.insert(0, monkeypatch_path)
    try:
        from myproject.data import CsvDataModule
        from myproject.tasks import RegressionTask as UserTask

        data = CsvDataModule(path=str(csv_file), target="progression")
        rows = data.splits["test"][0][:16]
        task = UserTask.load_from_checkpoint(best).eval()
        with torch.inference_mode():
            expected = task(rows)
    finally:
        sys.path.remove(monkeypatch_path)
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    assert torch.allclose(torch.from_numpy(session.run(None, {"features": rows.numpy()})[0]), expected, atol=1e-4)
    provenance = session.get_modelmeta().custom_metadata_map  # the same record as an image model's export
    assert {"litforge_version", "git_commit", "git_dirty", "source_checkpoint"} <= provenance.keys(), provenance


@pytest.mark.slow
def test_a_sweep_and_a_kill_9_resumed_by_resume_auto_run_on_the_users_project(tmp_path: Path):
    import torch

    root, _, overrides = project_run(tmp_path)
    tests_dir = str(ROOT / "tests")  # tests/faults.py: a SIGKILL at an exact optimizer step
    env = {"PYTHONPATH": os.pathsep.join([str(root), tests_dir, os.environ.get("PYTHONPATH", "")])}

    sweep = run_cli("train.py", *overrides, "optimizer.lr=0.01,0.003", log_dir=tmp_path / "sweep", env=env,
                    extra_args=("-m",))  # fmt: skip
    assert sweep.returncode == 0, sweep.output[-3000:]
    summary = next((tmp_path / "sweep").rglob("summary.md"))
    assert summary.read_text().count("optimizer.lr=") >= 2 and str(summary) in sweep.output

    logs = tmp_path / "logs"
    fault = ["+callbacks.fault._target_=faults.SignalAt", "+callbacks.fault.step=7", "+callbacks.fault.signal=SIGKILL"]
    killed = run_cli("train.py", *overrides, "checkpoint_every=3", *fault, log_dir=logs, env=env)
    assert killed.returncode == -9, killed.output[-3000:]
    run = single_run(logs, "diabetes")
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6, "the clock's save"
    resumed = run_cli(
        "train.py", *overrides, "resume=auto", fault[0], "+callbacks.fault.step=-1", log_dir=logs, env=env
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"litforge: resuming {run} from last.ckpt" in resumed.output
    assert single_run(logs, "diabetes") == run and math.isfinite(read_metrics(run)["metrics"]["test/mae"])


@pytest.mark.slow
def test_a_bad_value_of_the_users_own_argument_is_one_line(tmp_path: Path):
    root, _, overrides = project_run(tmp_path)
    result = run_cli("train.py", *overrides, "data.batch_size=0", log_dir=tmp_path / "logs",
                     env=with_project_on_path(root))  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.output
    line = next(x for x in result.output.splitlines() if "data.batch_size" in x)
    assert "data.batch_size=0" in line and ">= 1" in line, result.output[-2000:]
    assert not (tmp_path / "logs").exists()  # refused before Hydra made a run folder

    # the same through the project's own top config (--config-dir/--config-name), which the guide offers
    flags = ("--config-dir", str(root / "myproject" / "conf"), "--config-name", "myproject")
    result = run_cli("train.py", "data.path=d.csv", "data.batch_size=0", log_dir=tmp_path / "logs", extra_args=flags,
                     env=with_project_on_path(root))  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.output
    assert "litforge: error: data.batch_size=0: expected an integer >= 1" in result.output
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_a_table_in_another_format_needs_one_class_and_one_yaml(tmp_path: Path):
    files = {p: b for p, b in guide_files().items() if p.startswith("tabjson/")}
    assert len(files) <= 3 and sum(len(b.splitlines()) for b in files.values()) <= 60
    root = write_project(tmp_path / "project")
    wine = [
        {"alcohol": 12.0 + (i % 7) / 3, "hue": 0.5 + (i % 5) / 5, "label": "a" if i % 2 else "b"} for i in range(60)
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(row) for row in wine))
    command = next(line for line in GUIDE.read_text().splitlines() if "data=jsonl" in line and "train.py" in line)
    args = shlex.split(
        command.split("train.py", 1)[1].replace("$PWD", str(root)).replace("rows.jsonl", str(tmp_path / "rows.jsonl"))
    )
    env, logs = with_project_on_path(root), tmp_path / "logs"
    trained = run_cli("train.py", *args, "trainer.max_epochs=2", "print_config=false", "callbacks.progress_bar=null",
                      log_dir=logs, env=env)  # fmt: skip
    assert trained.returncode == 0, trained.output[-3000:]
    best = read_metrics(single_run(logs))["best_checkpoint"]
    (tmp_path / "new.jsonl").write_text(json.dumps({"alcohol": 13.1, "hue": 0.9}) + "\n" + json.dumps({"hue": 0.6}))
    new = tmp_path / "new.jsonl"
    predicted = run_cli(
        "predict.py", f"ckpt_path={best}", f"input={new}", "trusted_packages=[tabjson]", log_dir=logs, env=env
    )
    assert predicted.returncode == 0, predicted.output[-3000:]
    rows = (run_dirs(logs, "predict")[-1] / "predictions.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("input,predicted,class_name,confidence")
