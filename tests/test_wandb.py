"""logger=wandb offline: the run's .wandb record log read back with wandb's own reader (`wandb leet inspect`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TINY, run_cli, single_run


def test_wandb_offline_files_hold_the_run_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    log_dir = tmp_path / "logs"
    out = run_cli("train.py", "logger=[tensorboard,wandb]", *TINY, log_dir=log_dir, timeout=300)
    assert out.returncode == 0, out.output[-3000:]
    run_dir = single_run(log_dir)
    (record,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    summary = json.loads(subprocess.run(
        [str(Path(sys.executable).with_name("wandb")), "leet", "inspect", "--summary", "--json", str(record)],
        capture_output=True, text=True, check=True, env={**os.environ, "WANDB_SILENT": "true"}).stdout)
    assert record.name == f"run-{summary['run_id']}.wandb" and summary["state"] == "finished"
    assert summary["project"] == "train"
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert summary["summary"]["test/acc"] == metrics["test/acc"]
    assert {"train/acc", "val/acc", "val/loss"} <= set(summary["summary"])
    assert (run_dir / "tensorboard").is_dir()
