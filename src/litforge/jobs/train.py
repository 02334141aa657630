"""The training job: one plain function of the composed config, read top to bottom, each step one call down into the
package that owns it (check, typed settings, run folder and resume, provenance, data, task, Trainer, fit, test,
metrics.json). Hydra's entry point and error reporting live in `litforge.cli.main`, so a notebook calls it too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from litforge.callbacks.training import fit_or_stop, training_callbacks
from litforge.checkpointing import resume
from litforge.checkpointing.folders import check_folder, hold_run_folder, release_run_folder
from litforge.checkpointing.training import run_notes, starting_checkpoint, test_best_checkpoint
from litforge.config.settings import Train, job_settings
from litforge.core.contracts import check_trainable
from litforge.core.errors import ConfigError, TrainingStopped
from litforge.core.instantiate import instantiate_group, instantiate_named, to_plain
from litforge.jobs.build import build_task, task_class
from litforge.jobs.checks import check_at_start
from litforge.jobs.tuning import tune_before_fit
from litforge.parallel import launch
from litforge.parallel.dry_run import dry_run
from litforge.parallel.fit_trainer import build_fit_trainer, build_strategy, shards_data
from litforge.parallel.meta_init import meta_nets, wants_meta_init
from litforge.parallel.net_options import NetOptions, PreparesNet
from litforge.records import provenance
from litforge.records.metrics import write_metrics
from litforge.records.tracking import continue_runs, give_run_config, log_run_files
from litforge.runtime.devices import apply_matmul_precision
from litforge.runtime.ranks import in_multirun, is_rank_zero
from litforge.runtime.requeue import catch_early, ignore_from_now

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, validate and test as configured; returns the final metrics (also written to `metrics.json`)."""
    check_at_start(cfg, "train")  # once per run: skipped where the command line's check passed it
    task_cls = task_class(cfg)  # what the data is checked against, and a checkpoint to resume
    settings = job_settings(cfg, Train)  # the job's own keys, typed: read from here on, not from cfg
    requeue_signal = OmegaConf.select(cfg, "callbacks.checkpoint_on_signal.requeue_signal")
    catch_early(requeue_signal)  # SLURM's pre-emption signal while the job starts: noted, not fatal
    accelerator = OmegaConf.select(cfg, "trainer.accelerator", default="auto")
    precision = apply_matmul_precision(settings.matmul_precision, accelerator)  # process-wide, before any work
    if settings.dry_run:  # plan the run on fake ranks: no device, no run folder, no Trainer
        return dry_run(cfg, settings, build_task)

    output_dir = Path(settings.paths.output_dir)
    check_folder(output_dir, settings.paths.min_free_mb, key="the run folder")
    decided = resume.decide(
        settings.resume,
        settings.ckpt_path,
        settings.paths.log_dir,
        settings.task_name,
        in_multirun=in_multirun(),
        run_dir=output_dir,
    )
    ckpt_path, tracker_runs = starting_checkpoint(decided, task_cls, cfg.model)  # refused before any work if unfit
    for note in run_notes(cfg.trainer, cfg.data, tested=settings.test_after_training):
        log.warning("%s", note)
    launch.install()  # DDP/FSDP ranks started by Lightning reuse this Hydra job's run folder, also in a multirun
    output_dir.mkdir(parents=True, exist_ok=True)  # the check leaves no folder it made; this run writes here
    pl.seed_everything(settings.seed, workers=True, verbose=False)
    record = provenance.start_record(output_dir, precision, settings.tags)
    logger_cfg = continue_runs(OmegaConf.select(cfg, "logger"), tracker_runs)  # resumed: the same tracker runs
    try:
        if is_rank_zero():  # a live run's folder: resume=auto of another job skips it (removed when this run ends)
            hold_run_folder(output_dir)
        datamodule = instantiate_group("data", cfg.data)
        check_trainable(task_cls, datamodule)  # before the net is built from shapes a wrong pair cannot fit
        shape = datamodule.describe()  # data read where it must be (data=text): its refusals before the rest is built
        trainer_kwargs = instantiate_group("trainer", cfg.trainer)  # plain kwargs; a nested _target_ (profiler) built
        loggers = instantiate_named("logger", logger_cfg)
        configured = instantiate_named("callbacks", OmegaConf.select(cfg, "callbacks"))
        task = build_training_task(cfg, shape, settings)
        give_run_config(loggers, to_plain(cfg))  # MLflow's params: the whole config, not only the task's hparams
        tune_before_fit(settings.tune, task, datamodule, trainer_kwargs, loggers, output_dir, resuming=bool(ckpt_path))
        callbacks = training_callbacks(
            configured, trainer_kwargs, loggers, record, settings, output_dir / "checkpoints"
        )
        strategy = build_strategy(cfg.strategy, trainer_kwargs)
        trainer = build_fit_trainer(trainer_kwargs, strategy, task, datamodule, callbacks, loggers, settings)

        fit_or_stop(trainer, task, datamodule, ckpt_path, output_dir)
        ignore_from_now(requeue_signal)  # trained: a late pre-emption signal must not kill the finished job
        tested = test_best_checkpoint(trainer, task, datamodule, run=settings.test_after_training)
        objective = settings.objective
        result = write_metrics(output_dir, tested, objective.metric, objective.mode, write=trainer.is_global_zero)
    except BaseException as exc:
        if is_rank_zero():
            provenance.write_end(output_dir, record, "stopped" if isinstance(exc, TrainingStopped) else "failed")
            release_run_folder(output_dir)
        raise
    interrupted = result.pop("interrupted")
    if is_rank_zero():
        provenance.write_end(output_dir, record, "stopped" if interrupted else "finished")
        release_run_folder(output_dir)
        log_run_files(loggers, output_dir, result, record)  # trackers get the config, provenance, best checkpoint
    return result


def build_training_task(cfg: DictConfig, shape: Mapping[str, Any], settings: Train) -> pl.LightningModule:
    """The task as training needs it: its net on the meta device where a sharded strategy fills it later, and the
    run's net options (float8, activation checkpointing, compile, channels_last; litforge.parallel.net_options),
    which the task applies in Lightning's `configure_model`, before the strategy shards or wraps the net."""
    with meta_nets(wants_meta_init(cfg.strategy)):
        task = build_task(cfg, shape)
    options = NetOptions(
        float8=settings.float8,
        float8_all_gather=shards_data(cfg.strategy),
        activation_checkpointing=settings.activation_checkpointing,
        compile=settings.compile,
        channels_last=settings.channels_last,
    )
    if isinstance(task, PreparesNet):
        task.net_options = options
    elif asked := options.asked():
        raise ConfigError(
            f"{', '.join(asked)}: applied by the task's configure_model, and {type(task).__name__} declares no "
            "`net_options`: subclass LitforgeTask, or declare `net_options: NetOptions = NetOptions()` and call "
            "litforge.parallel.net_options.prepare_net(self.net, self.net_options, ...) in its configure_model"
        )
    return task
