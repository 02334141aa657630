"""The training job: one plain function of the composed config.

    datamodule → task (net built from the data's shape) → Trainer → fit → test the best checkpoint → metrics.json

Everything else (Hydra's entry point, error reporting, run folders) lives in `litforge.cli`, so this function can
also be called from a notebook with a config from Hydra's compose API.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.builders import build_strategy, build_task, instantiate_group, instantiate_named, to_plain
from litforge.errors import ConfigError

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, validate and test as configured; returns the final metrics (also written to `metrics.json`)."""
    import pytorch_lightning as pl

    from litforge.checkpoints import load_checkpoint
    from litforge.tasks.base import task_class_from_checkpoint

    output_dir = Path(cfg.paths.output_dir)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = instantiate_group("data", cfg.data)
    task = build_task(cfg, datamodule.describe())
    check_compatible(task, datamodule, cfg)

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path:
        checkpoint = load_checkpoint(ckpt_path)
        check_resumable(checkpoint, ckpt_path, type(task), task_class_from_checkpoint(checkpoint, ckpt_path), cfg)
        del checkpoint
        log.info("Resuming from %s", ckpt_path)

    trainer_kwargs = instantiate_group("trainer", cfg.trainer)  # plain kwargs; a nested _target_ (profiler) is built
    loggers = instantiate_named("logger", cfg.get("logger"))
    callbacks = respect_trainer_switches(instantiate_named("callbacks", cfg.get("callbacks")), trainer_kwargs, loggers)
    trainer = build_trainer(trainer_kwargs, strategy=build_strategy(cfg.get("strategy")), callbacks=callbacks,
                            logger=loggers or False)

    trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = scalar_metrics(trainer.callback_metrics)
    checkpoint_cb = trainer.checkpoint_callback
    best = getattr(checkpoint_cb, "best_model_path", "") or None
    last = _last_checkpoint(checkpoint_cb)  # before test(): restoring the best checkpoint resets the callback's state

    if cfg.get("test_after_training", True) and not trainer.interrupted:
        trainer.test(task, datamodule=datamodule, ckpt_path=best if best else None, verbose=False)
        metrics.update(scalar_metrics(trainer.callback_metrics))

    result = {
        "metrics": metrics,
        "objective": {"metric": cfg.objective.metric, "mode": cfg.objective.mode,
                      "value": metrics.get(cfg.objective.metric)},
        "best_checkpoint": best,
        "last_checkpoint": last,
        "output_dir": str(output_dir),
    }
    if trainer.is_global_zero:
        (output_dir / "metrics.json").write_text(json.dumps(result, indent=2))
    return result


def build_trainer(trainer_kwargs: dict[str, Any], **kwargs: Any) -> Any:
    """`pl.Trainer(...)`, with hardware and argument mistakes reported as one actionable line."""
    import pytorch_lightning as pl
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    try:
        return pl.Trainer(**trainer_kwargs, **kwargs)
    except MisconfigurationException as exc:
        raise ConfigError(f"the trainer cannot run on this machine as configured: {exc} "
                          "(use trainer=cpu, or trainer.accelerator=auto and trainer.devices=auto)") from None
    except ModuleNotFoundError as exc:
        raise ConfigError(f"the configured trainer needs a package that is not installed: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid trainer settings: {exc}") from None


def respect_trainer_switches(callbacks: list[Any], trainer_kwargs: dict[str, Any], loggers: list[Any]) -> list[Any]:
    """Switching something off (progress bar, model summary, logger) wins over the callbacks group, not clashes."""
    from pytorch_lightning.callbacks import LearningRateMonitor, ModelSummary, ProgressBar

    drop: tuple[type, ...] = () if loggers else (LearningRateMonitor,)
    if trainer_kwargs.get("enable_progress_bar") is False:
        drop += (ProgressBar,)
    if trainer_kwargs.get("enable_model_summary") is False:
        drop += (ModelSummary,)
    return [cb for cb in callbacks if not (drop and isinstance(cb, drop))]


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if not math.isnan(number):
            out[name] = number
    return dict(sorted(out.items()))


def check_compatible(task: Any, datamodule: Any, cfg: DictConfig) -> None:
    """Refuse a task × data pair that cannot work before any data is read or any step runs."""
    task_kind = getattr(task, "data_kind", None)
    data_kind = getattr(datamodule, "kind", None)
    if task_kind and data_kind and task_kind != data_kind:
        raise ConfigError(
            f"task `{type(task).__name__}` trains on {task_kind} data, but data `{type(datamodule).__name__}` is "
            f"{data_kind} data: pick a matching pair (e.g. an experiment= recipe), see `python train.py --help`"
        )


def check_resumable(checkpoint: dict[str, Any], path: str, task_cls: type, ckpt_task_cls: type,
                    cfg: DictConfig) -> None:
    """A resumed run must train the same task and the same net as the checkpoint, or the weights cannot fit."""
    if ckpt_task_cls is not task_cls:
        raise ConfigError(f"{path} was written by task {ckpt_task_cls.__name__}, but this run configures "
                          f"{task_cls.__name__}: resume with the same task= (and model=) as the original run")
    saved_net = checkpoint.get("hyper_parameters", {}).get("net")
    current_net = to_plain(cfg.model)
    if saved_net is not None and saved_net != current_net:
        raise ConfigError(
            f"{path} holds a different model than this run configures (checkpoint: {_describe(saved_net)}, "
            f"now: {_describe(current_net)}): pass the same model= and model.* overrides as the original run"
        )


def _describe(net_cfg: dict[str, Any]) -> str:
    target = str(net_cfg.get("_target_", "?")).rsplit(".", 1)[-1]
    knobs = ", ".join(f"{k}={v}" for k, v in net_cfg.items() if not k.startswith("_"))
    return f"{target}({knobs})"


def _last_checkpoint(callback: Any) -> str | None:
    path = getattr(callback, "last_model_path", "") if callback is not None else ""
    return path or None
