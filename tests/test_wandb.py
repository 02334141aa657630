"""logger=wandb offline: the run's .wandb record logs read back with wandb's own reader (`wandb leet inspect`), and
resume=auto continuing the same W&B run id. No network: offline mode, no `wandb login`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, single_run

pytestmark = pytest.mark.slow


def _inspect(record: Path) -> dict:
    """`wandb leet inspect --summary --json`: the run id, state, project, config and latest metrics of one log."""
    return json.loads(
        subprocess.run(
            [str(Path(sys.executable).with_name("wandb")), "leet", "inspect", "--summary", "--json", str(record)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "WANDB_SILENT": "true"},
        ).stdout
    )


def test_wandb_offline_files_hold_the_run_and_resume_continues_the_run_id(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    log_dir = tmp_path / "logs"
    common = ["logger=[tensorboard,wandb]", *TINY, "callbacks.early_stopping=null"]
    first = run_cli("train.py", *common, "trainer.max_epochs=1", log_dir=log_dir, timeout=300)
    assert first.returncode == 0, first.output[-3000:]
    run_dir = single_run(log_dir)
    (run_dir / "metrics.json").unlink()  # as if pre-empted after its first epoch: resume=auto picks it up
    (first_record,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    first_run = _inspect(first_record)
    run_id = first_run["run_id"]
    assert first_record.name == f"run-{run_id}.wandb" and first_run["project"] == "train"

    second = run_cli("train.py", *common, "resume=auto", "trainer.max_epochs=2", log_dir=log_dir, timeout=300)
    assert second.returncode == 0, second.output[-3000:]
    records = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(records) == 2 and {r.name for r in records} == {f"run-{run_id}.wandb"}, records  # the same run id
    resumed = _inspect(next(r for r in records if r != first_record))
    assert resumed["run_id"] == run_id and resumed["state"] == "finished"
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["litforge_provenance"]["tracker_runs"]["wandb"] == run_id

    config = resumed["config"]  # the flattened run config, this attempt's values
    assert config["data.batch_size"] == 64 and config["model._target_"] == "litforge.models.mlp.MLP"
    assert config["trainer.max_epochs"] == 2 and config["optimizer.lr"] == pytest.approx(0.001)
    assert resumed["summary"]["test/acc"] == pytest.approx(read_metrics(run_dir)["metrics"]["test/acc"])
    assert {"train/acc", "val/acc", "val/loss"} <= set(resumed["summary"])
    files = next(r for r in records if r != first_record).parent / "files"
    assert json.loads((files / "provenance.json").read_text())["status"] == "finished"
    assert (files / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "tensorboard").is_dir()  # the list combined both loggers
