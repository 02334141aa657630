"""The evaluation job: test a checkpoint on the data it was trained on (or another dataset of the same shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig
from pytorch_lightning.callbacks import RichProgressBar

from litforge.config.settings import Inference, job_settings
from litforge.core.contracts import check_evaluable
from litforge.core.instantiate import instantiate_group
from litforge.jobs.checks import check_at_start
from litforge.records.metrics import scalar_metrics
from litforge.records.provenance import describe_origin
from litforge.runtime.devices import build_trainer
from litforge.tasks.restore import load_for_inference


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    check_at_start(cfg, "eval")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Inference)  # the job's own keys, typed
    task, datamodule, checkpoint = load_for_inference(cfg)
    check_evaluable(task, datamodule, f"ckpt_path={settings.ckpt_path}")  # the eval contract, before any work
    task.set_decisions(cfg.task, "eval")  # task.threshold=0.3: the metrics at that decision (the task's `decisions`)
    pl.seed_everything(settings.seed, verbose=False)
    trainer_kwargs = {**instantiate_group("trainer", cfg.trainer), "enable_model_summary": False}
    trainer = build_trainer(trainer_kwargs, logger=False, callbacks=[RichProgressBar(leave=False)])
    trainer.test(task, datamodule=datamodule, verbose=False)
    output_dir = Path(settings.paths.output_dir)
    result = {
        "metrics": scalar_metrics(trainer.callback_metrics),
        "checkpoint": str(settings.ckpt_path),
        "decisions": task.decision_values(),
        "trained_at_commit": describe_origin(checkpoint),
        "output_dir": str(output_dir),
    }
    (output_dir / "metrics.json").write_text(json.dumps(result, indent=2))
    return result
