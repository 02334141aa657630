"""Mistakes that used to escape until inside fit (or until after Hydra made a run folder) get one line before any
run folder exists; a class defined outside litforge is checked from its own annotated signature."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TINY, make_image_folder, run_cli, stub_checkpoint


def _refused(result, log_dir: Path, says: str) -> str:
    """Exit 1, exactly one `litforge: error:` line holding `says`, no traceback, and no run folder written."""
    assert result.returncode == 1, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if "litforge: error:" in line]
    assert len(errors) == 1 and says in errors[0], result.output[-3000:]
    assert not list(log_dir.glob("*/runs/*")), sorted(log_dir.rglob("*"))
    return errors[0]


def test_a_run_never_writes_into_another_runs_folder(tmp_path: Path):
    log_dir = tmp_path / "logs"
    other = tmp_path / "finished_run"
    files = {
        ".hydra/overrides.yaml": "- model=cnn\n",
        "checkpoints/last.ckpt": "weights of another model",
        "metrics.json": '{"metrics": {"test/acc": 0.9}}',
        "provenance.json": "{}",
    }
    for name, text in files.items():
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        (other / name).write_text(text)
    before = {name: (other / name).stat().st_mtime_ns for name in files}
    result = run_cli("train.py", *TINY, f"hydra.run.dir={other}", log_dir=log_dir)
    line = _refused(result, log_dir, f"hydra.run.dir={other} is the folder of another run")
    assert f"resume={other}" in line
    assert {name: (other / name).read_text() for name in files} == files
    assert {name: (other / name).stat().st_mtime_ns for name in files} == before
    assert sorted(p.relative_to(other).as_posix() for p in other.rglob("*") if p.is_file()) == sorted(files)


def test_a_schedule_spanning_an_endless_run_is_refused_before_it_starts(tmp_path: Path):
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *TINY, "scheduler=onecycle", "trainer.max_epochs=-1", log_dir=log_dir)
    _refused(result, log_dir, "trainer.max_epochs=-1 with trainer.max_steps=-1 never ends")


def test_a_tracking_server_that_does_not_answer_is_refused_in_seconds(tmp_path: Path):
    with socket.socket() as probe:  # a port nobody listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_dir = tmp_path / "logs"
    start = time.monotonic()
    result = run_cli(
        "train.py", *TINY, "logger=mlflow", f"logger.mlflow.tracking_uri=http://127.0.0.1:{port}", log_dir=log_dir
    )
    _refused(result, log_dir, f"logger.mlflow.tracking_uri=http://127.0.0.1:{port}: no server answers there")
    assert time.monotonic() - start < 60


def test_an_image_folder_with_one_class_is_refused_before_it_starts(tmp_path: Path):
    root = make_image_folder(tmp_path / "images", classes=("cat",))
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *TINY, "data=image_folder", f"data.root={root}", log_dir=log_dir)
    _refused(result, log_dir, f"data.root={root} has one class folder (cat): a classifier needs two or more")


def test_a_users_own_class_is_checked_from_its_annotated_signature(tmp_path: Path):
    """No table to edit: the bound sits on the argument, and the check reads it before Hydra starts the run."""
    (tmp_path / "my_models.py").write_text(
        textwrap.dedent("""
        from typing import Annotated

        from pydantic import Field

        from litforge.models.mlp import MLP


        class WideMLP(MLP):
            def __init__(self, in_channels: int, image_size: tuple[int, int], num_classes: int,
                         width: Annotated[int, Field(ge=1, le=4096, examples=[128])] = 64) -> None:
                super().__init__(in_channels, image_size, num_classes, hidden_dims=[width])
    """)
    )
    log_dir = tmp_path / "logs"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    args = (*TINY, "model._target_=my_models.WideMLP", "~model.hidden_dims", "~model.dropout", "~model.embed_dim")
    result = run_cli("train.py", *args, "+model.width=0", log_dir=log_dir, env=env)
    _refused(result, log_dir, "model.width=0: expected an integer in [1, 4096], e.g. model.width=128")
    result = run_cli("train.py", *args, "+model.widht=8", log_dir=log_dir, env=env)
    _refused(result, log_dir, "model.widht is not an argument of my_models.WideMLP")


@pytest.mark.parametrize(
    ("script", "args", "says"),
    [
        (
            "train.py",
            ["strategy=pipeline", "data.batch_size=30"],
            "data.batch_size=30 is not divisible by strategy.micro",
        ),
        ("train.py", ["strategy=hsdp", "strategy.tensor_parallel_size=2"], "strategy.replicate_size=2 (HSDP) with"),
        ("train.py", ["data=streaming", "data.input_dir={tmp}"], "holds no litforge_facts.json"),
        ("train.py", ["tune=lr_find", "trainer.devices=2"], "tune=lr_find runs on one device, not trainer.devices=2"),
        (
            "train.py",
            ["tune=batch_size", "trainer=cpu"],
            "tune=batch_size finds the largest batch that fits GPU memory",
        ),
        (
            "prepare.py",
            ["data=streaming", "data.input_dir={tmp}", "output={tmp}/shards"],
            "prepare needs a source datamodule",
        ),
        ("export.py", ["ckpt_path={tmp}/last.ckpt", "formats=[tflite]"], "unknown export format ['tflite']"),
    ],
    ids=["pipeline", "hsdp", "streaming", "lr_find", "batch_size_finder", "prepare", "export"],
)
def test_refusals_of_the_jobs_come_before_hydra_starts(script: str, args: list[str], says: str, tmp_path: Path):
    log_dir = tmp_path / "logs"
    stub_checkpoint(tmp_path)  # export: a checkpoint that passes the checks of its file; then its options are judged
    result = run_cli(
        script, *(TINY if script == "train.py" else []), *(a.format(tmp=tmp_path) for a in args), log_dir=log_dir
    )
    _refused(result, log_dir, says)
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))


def test_a_target_that_does_not_import_is_refused_with_its_real_cause(tmp_path: Path):
    """Hydra's own message stops at "Error loading '<target>':"; the line names what failed inside the import."""
    (tmp_path / "my_data.py").write_text("import a_package_that_is_not_installed\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *TINY, "data._target_=my_data.CsvData", log_dir=log_dir, env=env)
    _refused(
        result,
        log_dir,
        "data._target_=my_data.CsvData does not import: ModuleNotFoundError: No module named "
        "'a_package_that_is_not_installed'",
    )
    result = run_cli("train.py", *TINY, "model._target_=litforge.models.mlp.MLPP", log_dir=log_dir)
    _refused(result, log_dir, "model._target_=litforge.models.mlp.MLPP does not import: AttributeError")


def test_a_mistake_in_a_users_datamodule_is_refused_before_torch_is_imported(tmp_path: Path):
    """The user's class is read from its source (litforge.config.source), following its litforge base class: the
    refusal costs no torch or Lightning import (4-6 s on 2 cores), counted in a fresh interpreter."""
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / "my_data.py").write_text(
        textwrap.dedent("""
        from typing import Annotated

        from pydantic import Field

        from litforge import HeldOut, ImageDataModule


        class MyDigits(ImageDataModule):
            def __init__(self, test_fraction: HeldOut = 0.2, classes: list[int] | None = None,
                         train_per_class: Annotated[int, Field(ge=1)] | None = None, **kwargs) -> None:
                super().__init__(**kwargs)
    """)
    )
    probe = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "sys.argv = ['train.py', 'data._target_=my_data.MyDigits', 'data.batch_size=0']\n"
        "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
        "except SystemExit as exc:\n    print('EXIT', exc.code)\n"
        "print('IMPORTED', sorted(m for m in ('torch', 'pytorch_lightning') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "EXIT 1" in proc.stdout and "IMPORTED []" in proc.stdout, proc.stdout + proc.stderr
    line = "litforge: error: data.batch_size=0: expected an integer >= 1, e.g. data.batch_size=64"
    assert proc.stderr.count(line) == 1, proc.stderr
