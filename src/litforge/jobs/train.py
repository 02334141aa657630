"""The training job: one plain function of the composed config, read top to bottom.

    check → seed → datamodule → task (built from the data's describe()) → what to resume → loggers, tuning,
    callbacks, Trainer → fit → test the best checkpoint → metrics.json and the provenance record

The config is read once, into built objects; each step is one call into a builder (litforge.jobs.build) or a helper
below that takes them. What `resume=` / `ckpt_path=` continue is decided in litforge.checkpointing.resume alone.

Everything else (Hydra's entry point, error reporting, run folders) lives in `litforge.cli.main`, so this function can
also be called from a notebook with a config from Hydra's compose API.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing import resume
from litforge.checkpointing.folders import check_folder, hold_run_folder, release_run_folder
from litforge.config.settings import Train, job_settings
from litforge.core.contracts import DataModule, missing_members, trains_on
from litforge.core.errors import ConfigError, TrainingStopped
from litforge.core.instantiate import instantiate_group, instantiate_named, to_plain
from litforge.jobs.build import (
    build_fit_trainer,
    build_strategy,
    build_task,
    build_training_task,
    runs_on_cuda,
    task_class,
    training_callbacks,
)
from litforge.jobs.checks import check_at_start
from litforge.jobs.tuning import tune_before_fit
from litforge.records.metrics import scalar_metrics
from litforge.runtime.ranks import in_multirun, is_rank_zero
from litforge.runtime.requeue import catch_early, ignore_from_now, slurm_job_id

log = logging.getLogger(__name__)


def apply_matmul_precision(precision: str | None, accelerator: Any = "auto") -> str | None:
    """`torch.set_float32_matmul_precision` for CUDA runs only; returns what float32 matmuls now use (None on CPU).

    "high" lets float32 matmuls and convolutions use TF32 tensor cores (Ampere and newer; an A100's dense TF32 peak is
    8x its fp32 one) at a 10-bit mantissa, PyTorch's and Lightning's advice for training (Lightning warns on every
    CUDA run that leaves it at "highest").
    It is a process-wide switch that no config shows, hence the provenance record.
    A CPU run leaves torch's default alone, so CPU results stay exact fp32 and comparable across machines.
    """
    import torch

    if precision is None or not runs_on_cuda(accelerator):
        return None
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = precision != "highest"
    return torch.get_float32_matmul_precision()


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, validate and test as configured; returns the final metrics (also written to `metrics.json`)."""
    import pytorch_lightning as pl

    from litforge.parallel import launch
    from litforge.records import provenance
    from litforge.records.tracking import continue_runs, give_run_config, log_run_files

    requeue_signal = OmegaConf.select(cfg, "callbacks.checkpoint_on_signal.requeue_signal")
    catch_early(requeue_signal)  # SLURM's pre-emption signal while the job starts: noted, not fatal
    check_at_start(cfg, "train")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Train)  # the job's own keys, typed: read from here on, not from cfg
    if settings.dry_run:  # plan the run on fake ranks: no device, no run folder, no Trainer
        from litforge.parallel.dry_run import dry_run

        return dry_run(cfg, build_task)
    for note in run_notes(cfg, tested=settings.test_after_training):
        log.warning("%s", note)
    launch.install()  # DDP/FSDP ranks started by Lightning reuse this Hydra job's run folder, also in a multirun
    output_dir = Path(settings.paths.output_dir)
    check_folder(output_dir, settings.paths.min_free_mb, key="the run folder")
    output_dir.mkdir(parents=True, exist_ok=True)  # the check leaves no folder it made; this run writes here
    pl.seed_everything(settings.seed, workers=True, verbose=False)
    precision = apply_matmul_precision(settings.matmul_precision, cfg.trainer.get("accelerator", "auto"))
    record = start_record(output_dir, precision, settings.tags)
    try:
        datamodule = instantiate_group("data", cfg.data)
        check_compatible(task_class(cfg), datamodule)  # before the net is built from shapes a wrong pair cannot fit
        task = build_training_task(cfg, datamodule.describe(), settings)
        ckpt_path = starting_checkpoint(
            resume.decide(
                settings.resume,
                settings.ckpt_path,
                settings.paths.log_dir,
                settings.task_name,
                in_multirun=in_multirun(),
                run_dir=output_dir,
            )
        )
        tracker_runs = check_resumable_file(ckpt_path, type(task), cfg) if ckpt_path else {}
        if is_rank_zero():  # a live run's folder: resume=auto of another job skips it (removed when this run ends)
            hold_run_folder(output_dir)

        trainer_kwargs = instantiate_group("trainer", cfg.trainer)  # plain kwargs; a nested _target_ (profiler) built
        loggers = instantiate_named("logger", continue_runs(cfg.get("logger"), tracker_runs))  # resumed: same runs
        give_run_config(loggers, to_plain(cfg))  # MLflow's params: the whole config, not only the task's hparams
        tune_before_fit(settings.tune, task, datamodule, trainer_kwargs, loggers, output_dir, resuming=bool(ckpt_path))
        callbacks = training_callbacks(
            instantiate_named("callbacks", cfg.get("callbacks")),
            trainer_kwargs,
            loggers,
            record,
            settings,
            checkpoint_dir=output_dir / "checkpoints",
        )
        trainer = build_fit_trainer(
            trainer_kwargs,
            build_strategy(cfg.strategy, trainer_kwargs),
            task,
            datamodule,
            callbacks,
            loggers,
            settings,
        )

        fit_or_stop(trainer, task, datamodule, ckpt_path, output_dir)
        ignore_from_now(requeue_signal)  # trained: a late pre-emption signal must not kill the finished job
        result = test_best_checkpoint(trainer, task, datamodule, run=settings.test_after_training)
        result = write_metrics(output_dir, result, settings.objective, write=trainer.is_global_zero)
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


def start_record(output_dir: Path, matmul_precision: str | None, tags: list[Any]) -> dict[str, Any]:
    """The run's provenance (with its `tags=`), written at its start by rank 0 (other ranks keep only what their
    checkpoints carry)."""
    from litforge.records import provenance

    if is_rank_zero():
        return provenance.write_start(output_dir, settings={"matmul_precision": matmul_precision}, tags=tags)
    return {"git": provenance.git_state(), "start": provenance.now()}


def starting_checkpoint(decided: resume.Resume) -> str | None:
    """The checkpoint `fit` starts from (litforge.checkpointing.resume decided it); None to start fresh."""
    if decided.checkpoint:
        log.info("Resuming from %s", decided.checkpoint)
    elif decided.asked:
        log.info("resume=%s: no interrupted run found, starting a new one", decided.asked)
    return decided.checkpoint


def check_resumable_file(ckpt_path: str, task_cls: type, cfg: DictConfig) -> dict[str, str]:
    """Load the checkpoint once to refuse a task or net it cannot fit; returns the tracker runs it continues."""
    from litforge.checkpointing.load import load_checkpoint
    from litforge.records.provenance import CHECKPOINT_KEY

    checkpoint = load_checkpoint(ckpt_path)
    check_resumable(checkpoint, ckpt_path, task_cls, cfg)
    return (checkpoint.get(CHECKPOINT_KEY) or {}).get("tracker_runs") or {}


def test_best_checkpoint(trainer: Any, task: Any, datamodule: Any, *, run: bool) -> dict[str, Any]:
    """Test the best checkpoint after a fit that was not interrupted; the metrics and the checkpoints it left."""
    from litforge.checkpointing.model_checkpoint import latest_path

    metrics = scalar_metrics(trainer.callback_metrics)
    checkpoint_cb = trainer.checkpoint_callback
    best = getattr(checkpoint_cb, "best_model_path", "") or None
    last = latest_path(trainer)  # before test(): restoring the best checkpoint resets the callback's state
    tested = None
    if run and not trainer.interrupted:
        trainer.test(task, datamodule=datamodule, ckpt_path=best if best else None, verbose=False)
        metrics.update(scalar_metrics(trainer.callback_metrics))
        monitor = getattr(checkpoint_cb, "monitor", None)
        tested = (
            (f"the best checkpoint by {monitor}" if monitor else "the last checkpoint (none is picked by a metric)")
            if best
            else f"the last weights (no {monitor or 'monitored metric'} was logged before training ended, so there "
            "is no best checkpoint: validate sooner, e.g. trainer.val_check_interval=<steps>)"
        )
    return {
        "metrics": metrics,
        "best_checkpoint": best,
        "last_checkpoint": last,
        "interrupted": bool(trainer.interrupted),
        "tested": tested,
    }


def write_metrics(output_dir: Path, tested: dict[str, Any], objective: Any, *, write: bool) -> dict[str, Any]:
    """The run's result with its objective's value; `metrics.json` (a finished run's marker) where `write`."""
    metrics = tested["metrics"]
    result = {
        "metrics": metrics,
        "objective": {"metric": objective.metric, "mode": objective.mode, "value": metrics.get(objective.metric)},
        "best_checkpoint": tested["best_checkpoint"],
        "last_checkpoint": tested["last_checkpoint"],
        "output_dir": str(output_dir),
        "interrupted": tested["interrupted"],
        "tested": tested["tested"],
    }
    if write:
        (output_dir / "metrics.json").write_text(
            json.dumps({k: v for k, v in result.items() if k != "interrupted"}, indent=2)
        )
    return result


def fit_or_stop(trainer: Any, task: Any, datamodule: Any, ckpt_path: str | None, output_dir: Path) -> None:
    """`trainer.fit`; SIGTERM (after the on-signal checkpoint is saved) ends the run with how to resume it."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    where = "at step {} (epoch {})"
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    except SIGTERMException:
        saved = next((cb.saved_path for cb in trainer.callbacks if getattr(cb, "saved_path", None)), None)
        on_signal = next((cb for cb in trainer.callbacks if isinstance(getattr(cb, "stopped_by", None), str)), None)
        by = on_signal.stopped_by if on_signal is not None else "SIGTERM"
        requeued = getattr(on_signal, "requeued", None)
        resume_hint = f"Continue with: python train.py resume={output_dir}"
        if requeued is not None and requeued.done:
            then = f"requeued SLURM job {requeued.job_id} (scontrol requeue): it continues from that checkpoint"
        elif getattr(on_signal, "requeue_agreed", False) and slurm_job_id() and not trainer.is_global_zero:
            then = f"global rank 0 requeues SLURM job {slurm_job_id()}: it continues from that checkpoint"
        elif requeued is not None and requeued.job_id is not None:
            then = f"requeueing SLURM job {requeued.job_id} failed ({requeued.problem}). {resume_hint}"
        else:
            then = resume_hint
        raise TrainingStopped(
            f"stopped by {by} {where.format(trainer.global_step, trainer.current_epoch)}; "
            + (
                f"saved {saved}. {then}" if saved else "no checkpoint was saved (enable callbacks.checkpoint_on_signal)"
            ),
            exit_code=143,  # 128 + SIGTERM, what a shell reports for a terminated process: resumable
        ) from None
    except SystemExit:  # Ctrl-C: Lightning tears the run down, then exits (pytorch_lightning/trainer/call.py)
        if not trainer.interrupted:
            raise
        last = resume.run_checkpoint(output_dir)  # no save at Ctrl-C: the newest checkpoint written before it
        raise TrainingStopped(
            f"stopped by Ctrl-C {where.format(trainer.global_step, trainer.current_epoch)}; "
            + (
                f"the last checkpoint is {last}. Continue from it with: python train.py resume={output_dir}"
                if last
                else "no checkpoint was written yet (one is written at each epoch end, or every checkpoint_every)"
            ),
            exit_code=130,  # 128 + SIGINT
        ) from None


def check_compatible(task_cls: type, datamodule: Any) -> None:
    """Refuse a task × data pair that cannot work before any data is read or any step runs.

    The task is built from `datamodule.describe()` and trains only on its own `data_kind`
    (litforge.core.contracts), so a datamodule without those members, or of another kind, is a configuration
    mistake, not a crash to debug.
    """
    missing = missing_members(datamodule, DataModule)
    if missing:
        raise ConfigError(
            f"data `{type(datamodule).__name__}` lacks {', '.join(f'`{m}`' for m in missing)}: a litforge datamodule "
            "states its `kind` (e.g. 'image'), its `batch_size` and its shape facts in `describe()` "
            "(litforge.core.contracts.DataModule; docs/extending.md adds one)"
        )
    kinds = trains_on(task_cls)
    if not kinds:
        raise ConfigError(
            f"task `{task_cls.__name__}` does not say which data it trains on: give it a class "
            "attribute `data_kind` (e.g. 'image', or a tuple of kinds), as litforge.tasks.base.LitforgeTask does"
        )
    if datamodule.kind not in kinds:
        raise ConfigError(
            f"task `{task_cls.__name__}` trains on {' or '.join(kinds)} data, but data "
            f"`{type(datamodule).__name__}` is {datamodule.kind} data: pick a matching pair (e.g. an experiment= "
            "recipe), see `python train.py --help`"
        )


def check_resumable(checkpoint: dict[str, Any], path: str, task_cls: type, cfg: DictConfig) -> None:
    """A resumed run must train the same task and the same net as the checkpoint, or the weights cannot fit.

    Compared by name: this run builds the class its config names (maybe a user's own, outside litforge), and
    Lightning restores only tensors and plain data into it, so nothing the checkpoint names is imported here. The
    command line's check asked the same of the checkpoint's metadata (litforge.checkpointing.resume.check_early).
    """
    from litforge.tasks.restore import recorded_task_class

    resume.check_continues(
        path,
        recorded_task_class(checkpoint, path),
        f"{task_cls.__module__}.{task_cls.__qualname__}",
        checkpoint.get("hyper_parameters", {}).get("net"),
        to_plain(cfg.model),
    )


def run_notes(cfg: Any, tested: bool) -> list[str]:
    """What a valid training config will not do although a user may expect it (e.g. no validation at all); `tested`:
    `test_after_training`."""
    trainer, data = cfg.trainer, cfg.data
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if trainer.get("limit_val_batches") == 0:
        why = "trainer.limit_val_batches=0"
    elif data.get("val_fraction") == 0:
        why = "data.val_fraction=0"
    elif isinstance(every, int) and isinstance(epochs, int) and 0 < epochs < every and not trainer.get("fast_dev_run"):
        why = f"trainer.check_val_every_n_epoch={every} > trainer.max_epochs={epochs}"
    else:
        return []
    return [
        f"no validation in this run ({why}): no best checkpoint, no early stopping and no objective value; the last "
        f"weights are saved{' and tested' if tested else ''}"
    ]
