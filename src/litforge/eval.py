"""The evaluation job: test a checkpoint on the data it was trained on (or another dataset of the same shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.builders import instantiate_group, to_plain
from litforge.errors import ConfigError
from litforge.metrics import scalar_metrics
from litforge.train import build_trainer


def load_for_inference(cfg: DictConfig, checkpoint: dict[str, Any] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(task, datamodule, checkpoint) from `cfg.ckpt_path`; the data config comes from the checkpoint unless given.

    `checkpoint`: the already loaded (and possibly normalised, see export.py) contents of `cfg.ckpt_path`.
    """
    from litforge.checkpoints import check_trusted_targets, load_checkpoint
    from litforge.tasks.base import CHECKPOINT_KEY, restore_task

    path = str(cfg.ckpt_path)
    checkpoint = checkpoint if checkpoint is not None else load_checkpoint(path)
    task = restore_task(checkpoint, path)
    run_config = checkpoint[CHECKPOINT_KEY].get("run_config") or {}
    data_cfg = to_plain(cfg.data) if cfg.get("data") else run_config.get("data")
    if not data_cfg:
        raise ConfigError(f"{path} does not record its data config: pass data=<option> (see conf/data/)")
    if not cfg.get("data"):
        check_trusted_targets(data_cfg, path, "data")
    datamodule = instantiate_group("data", data_cfg)
    state = checkpoint.get(type(datamodule).__qualname__)
    if state and not cfg.get("data"):
        datamodule.load_state_dict(state)
    check_same_shape(task, datamodule, path)
    return task, datamodule, checkpoint


def check_same_shape(task: Any, datamodule: Any, path: str) -> None:
    expected = {k: task.hparams.get(k) for k in ("input_shape", "num_classes") if k in task.hparams}
    actual = {k: v for k, v in datamodule.describe().items() if k in expected}
    if expected != actual:
        raise ConfigError(f"{path} was trained on data of shape {expected}, but the chosen data has {actual}: "
                          "evaluate on data with the same image shape and number of classes")


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import RichProgressBar

    task, datamodule, _ = load_for_inference(cfg)
    pl.seed_everything(cfg.seed, verbose=False)
    trainer_kwargs = {**instantiate_group("trainer", cfg.trainer), "enable_model_summary": False}
    trainer = build_trainer(trainer_kwargs, logger=False, callbacks=[RichProgressBar(leave=False)])
    trainer.test(task, datamodule=datamodule, verbose=False)
    output_dir = Path(cfg.paths.output_dir)
    result = {"metrics": scalar_metrics(trainer.callback_metrics), "checkpoint": str(cfg.ckpt_path),
              "output_dir": str(output_dir)}
    (output_dir / "metrics.json").write_text(json.dumps(result, indent=2))
    return result
