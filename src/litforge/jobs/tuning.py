"""`tune=lr_find | batch_size | none`: Lightning's finders (`pytorch_lightning.tuner.Tuner`), once, before the fit.

Each finder runs on a throwaway one-device Trainer built from the run's own trainer keyword arguments, without
callbacks, loggers or checkpointing and with its scratch checkpoint in a temporary folder, so nothing it does reaches
the run's checkpoints, curves or folder; Lightning restores the weights and optimizer state it started from. What it
found is then applied to what the real fit builds from (`tune.apply=true`: the task's optimizer config, the
datamodule's `batch_size`) or only reported, and recorded in the run folder (`lr_find.json` and `lr_find.png`, also
TensorBoard image `tune/lr_find`; `batch_size.json`) and in one printed line.

Where a finder cannot work the run is refused before anything is built (:func:`check_tuning`): several devices
(Lightning's finders are single-device; a suggestion for one device is not one for N replicas), tasks without a
per-batch loss (DQN acts in its environment), and `tune=batch_size` on CPU, where memory does not limit the batch.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, SupportsFloat

import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger, TensorBoardLogger
from pytorch_lightning.tuner import Tuner
from pytorch_lightning.utilities.seed import isolate_rng
from torchmetrics import Metric

from litforge.config.settings import Tune
from litforge.core.contracts import DataModule
from litforge.core.errors import ConfigError
from litforge.jobs.checks import ONE_DEVICE, SetsLearningRate
from litforge.runtime.devices import build_trainer
from litforge.runtime.host_reads import KeepsLosses, StepLosses
from litforge.runtime.ranks import is_rank_zero
from litforge.tasks.task import LitforgeTask

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure  # matplotlib (~0.3 s): imported only by a run that draws lr_find

log = logging.getLogger(__name__)

TB_TAG = "tune/lr_find"


def tune(
    settings: Tune,
    task: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    trainer_kwargs: Mapping[str, Any],
    loggers: list[Logger],
    output_dir: Path,
) -> dict[str, Any] | None:
    """Run the configured finder on a throwaway Trainer, apply or only report what it found; returns the record
    written to `<output_dir>/<finder>.json` (None for `tune=none`)."""
    name = settings.finder
    if name == "none":
        return None
    chosen = settings.model_dump(exclude_unset=True)  # the keys of the finder's option file (conf/tune/)
    with tempfile.TemporaryDirectory(prefix="litforge-tune-") as scratch:
        trainer = throwaway_trainer(trainer_kwargs, scratch)
        if trainer.world_size > 1:  # trainer.devices=auto on a machine with several GPUs
            raise ConfigError(
                f"tune={name} runs on one device, but this trainer uses {trainer.world_size}: "
                f"{ONE_DEVICE[1]}; pass trainer.devices=1"
            )
        if name == "lr_find":
            record, figure = _find_lr(Tuner(trainer), task, datamodule, chosen)
        else:
            record, figure = _find_batch_size(Tuner(trainer), task, datamodule, chosen), None
    forget_finder_steps(task)
    if is_rank_zero():
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / f"{name}.json").write_text(json.dumps(record, indent=2))
        if figure is not None:
            figure.savefig(output_dir / "lr_find.png", dpi=100)
            _log_figure(loggers, figure)
    return record


def tune_before_fit(
    settings: Tune,
    task: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    trainer_kwargs: Mapping[str, Any],
    loggers: list[Logger],
    output_dir: Path,
    resuming: bool,
) -> None:
    """`tune=lr_find|batch_size`: Lightning's finder on a throwaway Trainer (litforge.jobs.tuning), inside Lightning's
    `isolate_rng` (torch, CUDA, numpy and Python generators put back after), so the fit draws the same dropout masks
    and augmentations as an untuned run; the finder restores the weights it started from."""
    name = settings.finder
    if name == "none":
        return
    if resuming:  # the checkpoint's optimizer state (its lr) and data settings continue the original run
        log.info("tune=%s: skipped, this run resumes from a checkpoint", name)
        return
    with isolate_rng():
        tune(settings, task, datamodule, trainer_kwargs, loggers, output_dir)


def throwaway_trainer(trainer_kwargs: Mapping[str, Any], root: str) -> pl.Trainer:
    """A Trainer for the finder: the run's settings (precision, accelerator, clipping, accumulation, limits), but no
    callbacks, loggers, checkpoints, progress bar, profiler or validation. The finders count steps (they set
    `max_steps`), so the epoch limit is out of their way: short epochs (`limit_train_batches`) must not end the range
    test early, and an early stop on a diverging loss must not wait for `min_epochs`. It stays finite because an
    epoch-based schedule needs a length; lr_find replaces the schedule, and over a batch-size trial's few steps a
    schedule that long keeps the configured lr."""
    kwargs = {
        **trainer_kwargs,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "profiler": None,
        "default_root_dir": root,
        "max_epochs": 10**6,
        "max_steps": -1,
        "min_epochs": None,
        "num_sanity_val_steps": 0,
        "val_check_interval": None,
        "check_val_every_n_epoch": 10**9,
    }
    return build_trainer(kwargs, strategy="auto", callbacks=[], logger=False)


def _find_lr(
    tuner: Tuner, task: pl.LightningModule, datamodule: pl.LightningDataModule, cfg: Mapping[str, Any]
) -> tuple[dict[str, Any], Figure | None]:
    """Lightning's lr range test; `update_attr=False` because litforge's tasks build the optimizer from
    `optimizer_cfg`, not from an `lr` attribute: the suggestion is applied with `task.set_learning_rate`."""
    settings = {
        key: cfg[key] for key in ("min_lr", "max_lr", "num_training", "mode", "early_stop_threshold") if key in cfg
    }
    optimizer = task.optimizer_cfg if isinstance(task, LitforgeTask) else {}
    before = float(optimizer["lr"]) if optimizer.get("lr") else None
    finder = tuner.lr_find(task, datamodule=datamodule, update_attr=False, **settings)
    if finder is None:  # Lightning skips its finders under trainer.fast_dev_run
        log.info("lr_find: skipped under trainer.fast_dev_run; optimizer.lr stays %s", _lr(before))
        return {"finder": "lr_find", "skipped": "trainer.fast_dev_run", "lr": before}, None
    suggestion = finder.suggestion()
    apply = bool(cfg["apply"]) and suggestion is not None
    if apply and suggestion is not None and isinstance(task, SetsLearningRate):  # check_tuning asked for it
        task.set_learning_rate(suggestion)
    steps = len(finder.results["lr"])
    if suggestion is None:
        log.warning(
            "lr_find: no suggestion from %d steps (the loss diverged early or the data is too short): "
            "optimizer.lr stays %s; lower tune.max_lr or raise tune.num_training",
            steps,
            _lr(before),
        )
    elif apply:
        log.info("lr_find: suggested lr %s (applied; optimizer.lr was %s)", _lr(suggestion), _lr(before))
    else:
        log.info(
            "lr_find: suggested lr %s (not applied, tune.apply=false: optimizer.lr stays %s)",
            _lr(suggestion),
            _lr(before),
        )
    record = {
        "finder": "lr_find",
        "suggestion": suggestion,
        "applied": apply,
        "lr_before": before,
        "lr": suggestion if apply else before,
        **settings,
        "steps": steps,
        "results": {
            "lr": [float(v) for v in finder.results["lr"]],
            "loss": [_finite(v) for v in finder.results["loss"]],
        },
    }
    return record, _plot(finder, suggestion)


def _find_batch_size(
    tuner: Tuner, task: pl.LightningModule, datamodule: pl.LightningDataModule, cfg: Mapping[str, Any]
) -> dict[str, Any]:
    """Lightning's batch-size finder on the datamodule's `batch_size` (what `data.batch_size` sets); Lightning
    leaves its last size in place, so `apply=false` puts the configured one back."""
    before = datamodule.batch_size if isinstance(datamodule, DataModule) else None
    if not isinstance(before, int):
        raise ConfigError(
            f"tune=batch_size scales the datamodule's `batch_size`; data={type(datamodule).__name__} "
            "has none: use tune=none"
        )
    settings = {key: cfg[key] for key in ("mode", "init_val", "max_trials", "steps_per_trial", "max_val") if key in cfg}
    found = tuner.scale_batch_size(task, datamodule=datamodule, batch_arg_name="batch_size", **settings)
    apply = bool(cfg["apply"]) and found is not None
    _set_batch_size(task, datamodule, found if apply and found is not None else before)
    if found is None:
        log.info("batch_size: skipped under trainer.fast_dev_run; data.batch_size stays %d", before)
    elif apply:
        log.info("batch_size: largest batch that fits is %d (applied; data.batch_size was %d)", found, before)
    else:
        log.info(
            "batch_size: largest batch that fits is %d (not applied, tune.apply=false: data.batch_size stays %d)",
            found,
            before,
        )
    return {
        "finder": "batch_size",
        "found": found,
        "applied": apply,
        "batch_size_before": before,
        "batch_size": found if apply else before,
        **settings,
    }


def _set_batch_size(task: pl.LightningModule, datamodule: pl.LightningDataModule, value: int) -> None:
    """The datamodule's batch size and its hparams (Lightning's finder sets both; the loggers record the hparams'
    initial copy), and the run config the task stores in checkpoints (eval and predict rebuild the data from it)."""
    if isinstance(datamodule, DataModule):  # what _find_batch_size asked for
        datamodule.batch_size = value
    if "batch_size" in datamodule.hparams:
        datamodule.hparams["batch_size"] = value
    if isinstance(task, LitforgeTask) and task.run_config and isinstance(task.run_config.get("data"), dict):
        task.run_config = {**task.run_config, "data": {**task.run_config["data"], "batch_size": value}}


def forget_finder_steps(task: pl.LightningModule) -> None:
    """Drop what the finder's training steps left in the task besides the weights Lightning restores: torchmetrics
    states (else the first epoch's `train/acc` counts the finder's batches) and the kept step losses."""
    for module in task.modules():
        if isinstance(module, Metric):
            module.reset()
    if isinstance(task, KeepsLosses):
        task.step_losses = StepLosses()


class PlotsRates(Protocol):
    """What `Tuner.lr_find` returns, as far as the plot uses it (Lightning names that class only privately)."""

    def plot(self, suggest: bool = False, show: bool = False, ax: Axes | None = None) -> Figure | SubFigure | None: ...


def _plot(finder: PlotsRates, suggestion: float | None) -> Figure:
    """Lightning's own loss-vs-lr plot (`_LRFinder.plot`, the suggestion as a red dot) on a matplotlib Figure made
    without pyplot, so no global figure state or GUI backend is involved."""
    from matplotlib.figure import Figure  # matplotlib (~0.3 s): imported only by a run that draws lr_find

    figure = Figure(figsize=(6, 4))
    ax = figure.add_subplot()
    finder.plot(suggest=suggestion is not None, ax=ax)
    ax.set_title(f"lr_find: suggested lr {_lr(suggestion)}" if suggestion is not None else "lr_find: no suggestion")
    figure.tight_layout()
    return figure


def _log_figure(loggers: list[Logger], figure: Figure) -> None:
    """The plot as TensorBoard image `tune/lr_find` (step 0) in every TensorBoard logger of the run."""
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure(TB_TAG, figure, global_step=0, close=False)
            logger.experiment.flush()


def _lr(value: float | None) -> str:
    return "unset" if value is None else f"{value:.1e}"


def _finite(value: SupportsFloat) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None  # JSON has no NaN or inf
