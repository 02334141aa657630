"""Experiment trackers beyond TensorBoard: `logger=mlflow` (docs/tracking.md).

`MLflowLogger` is Lightning's `MLFlowLogger` with what a litforge run needs and Lightning's lacks:
- an offline store by default: a SQLite database `<paths.log_dir>/mlflow.db` with artifacts in
  `<paths.log_dir>/mlartifacts` (Lightning's default is a `./mlruns` file store, which MLflow 3 deprecates), or a
  team server with `logger.mlflow.tracking_uri=http://host:5000`;
- params = the flattened run config (:func:`give_run_config`) (`data.batch_size`, `optimizer.lr`, ... as typed on the
  command line), not the task's constructor arguments, and values up to MLflow's limit (Lightning cuts them at 250
  characters);
- a resumed run (`resume=auto`) continues the same MLflow run: the run id travels in every checkpoint
  (litforge.callbacks.provenance), params already logged are not logged again (MLflow refuses a changed value);
- at the end the run receives the config, the provenance file (and diff), and the best checkpoint's path as
  artifacts, and the commit as MLflow's own `mlflow.source.git.commit` tag (:func:`log_run_files`).

`WandbLogger` is Lightning's `WandbLogger` (`logger=wandb`, offline by default) with the same three additions: the
flattened run config as W&B config, the run id under the `run_id` key that :func:`continue_runs` fills on resume
(Lightning's logger takes it as `id=`, with `resume="allow"`), and the run's files saved into the W&B run.
"""

from __future__ import annotations

import logging
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pytorch_lightning.loggers import MLFlowLogger
from pytorch_lightning.loggers import WandbLogger as LightningWandbLogger

from litforge.core.contracts import Tracker
from litforge.records.provenance import DIFF_FILE, FILE
from litforge.runtime.ranks import is_rank_zero

log = logging.getLogger(__name__)

PARAM_CHUNK = 100  # MLflow's most params per log_batch call


def reopen(tracking_uri: str, run_id: str) -> bool:
    """Set MLflow run `run_id` back to RUNNING to continue it; False (a new run starts) if the store lacks it."""
    from mlflow import MlflowClient  # extra [trackers]
    from mlflow.exceptions import MlflowException  # extra [trackers]

    client = MlflowClient(tracking_uri)
    try:
        client.get_run(run_id)
    except MlflowException:
        log.warning("MLflow run %s (from the checkpoint) is not in %s: starting a new run", run_id, tracking_uri)
        return False
    client.update_run(run_id, status="RUNNING")
    log.info("continuing MLflow run %s", run_id)
    return True


def run_files(run_dir: Path) -> list[Path]:
    """What a tracker keeps of a run: its config, overrides, provenance record and uncommitted diff, where written."""
    names = (".hydra/config.yaml", ".hydra/overrides.yaml", FILE, DIFF_FILE)
    return [path for path in (run_dir / name for name in names) if path.is_file()]


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"data": {"batch_size": 64}} → {"data.batch_size": 64}; lists stay one value (`[16,32]`)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


class MLflowLogger(MLFlowLogger):
    """Lightning's MLFlowLogger over a local SQLite store by default, logging the run config as params."""

    tracker = "mlflow"  # the key of this tracker's run id in a checkpoint, and its `logger=` option's name

    def __init__(
        self,
        tracking_uri: str | None = None,
        store_dir: str = "logs",
        experiment_name: str = "train",
        run_dir: str | None = None,
        run_name: str | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | list[str | int] | None = None,
    ) -> None:
        artifact_location = None
        run_name = run_name or (Path(run_dir).name if run_dir else None)
        tags = dict(tags) if isinstance(tags, Mapping) else {str(t): "true" for t in tags or []}  # `tags=[a,b]`
        tags = {**tags, **({"litforge_run_dir": str(Path(run_dir).resolve())} if run_dir else {})}
        if not tracking_uri:
            store = Path(store_dir).expanduser().resolve()
            store.mkdir(parents=True, exist_ok=True)
            tracking_uri = f"sqlite:///{store / 'mlflow.db'}"
            artifact_location = (store / "mlartifacts").as_uri()
        resumed = bool(run_id) and reopen(tracking_uri, str(run_id))
        super().__init__(
            experiment_name=experiment_name,
            run_name=run_name,
            tracking_uri=tracking_uri,
            tags=tags,
            artifact_location=artifact_location,
            run_id=run_id if resumed else None,
            log_model=False,
        )
        self.run_config: Mapping[str, Any] | None = None  # set by the training job (:func:`give_run_config`)
        self.resumed = resumed

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """Log the run config flattened (Lightning hands over the task's and data's hparams: `params` is used only
        when no run config was given)."""
        from mlflow.entities import Param  # extra [trackers]
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH  # extra [trackers]

        if not is_rank_zero():
            return
        config = (
            self.run_config
            if self.run_config is not None
            else (dict(params) if isinstance(params, Mapping) else vars(params))
        )
        flat = {
            key: "null" if value is None else str(value)[:MAX_PARAM_VAL_LENGTH]
            for key, value in flatten(config).items()
        }
        if self.resumed:
            logged = self.experiment.get_run(self.run_id).data.params
            changed = sorted(k for k in flat if k in logged and logged[k] != flat[k])
            if changed:
                log.info(
                    "MLflow run %s keeps its first values of %s (params cannot change)", self.run_id, ", ".join(changed)
                )
            flat = {k: v for k, v in flat.items() if k not in logged}
        items = [Param(key=k, value=v) for k, v in flat.items()]
        for start in range(0, len(items), PARAM_CHUNK):
            self.experiment.log_batch(run_id=self.run_id, params=items[start : start + PARAM_CHUNK])

    def log_run_files(self, run_dir: Path, result: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        """The config, the provenance (and diff) and the best checkpoint's path as artifacts; the commit as a tag."""
        client, run_id = self.experiment, self.run_id
        for path in run_files(run_dir):
            client.log_artifact(run_id, str(path))
        best = result.get("best_checkpoint") or result.get("last_checkpoint")
        client.log_text(run_id, f"{best or ''}\n", "best_checkpoint.txt")
        commit = (record.get("git") or {}).get("commit")
        if commit:
            client.set_tag(run_id, "mlflow.source.git.commit", commit)


class WandbLogger(LightningWandbLogger):
    """Lightning's WandbLogger, offline by default, continuing the W&B run whose id a resumed checkpoint carries.

    `version` (what litforge.callbacks.provenance stores as `tracker_runs["wandb"]`) is the W&B run id: `run_id` when
    given, else the id W&B draws when the run starts (before the first checkpoint: the config is logged at fit start).
    A resumed offline run writes a new `offline-run-<time>-<id>` folder under the same id; `wandb sync` appends it.
    """

    tracker = "wandb"  # the key of this tracker's run id in a checkpoint, and its `logger=` option's name

    def __init__(
        self,
        save_dir: str = ".",
        project: str = "train",
        offline: bool = True,
        run_id: str | None = None,
        run_name: str | None = None,
        log_model: bool | Literal["all"] = False,
        tags: list[str | int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            tags=[str(t) for t in tags or []],  # the run's `tags=`: W&B's run tags (wandb.init)
            name=run_name,
            save_dir=save_dir,
            project=project,
            offline=offline,
            id=run_id,
            # validated config string; WandbLogger wants Literal['all']
            log_model=log_model,
            **kwargs,
        )  # Lightning passes id= with resume="allow" to wandb.init
        self.run_config: Mapping[str, Any] | None = None  # set by the training job (:func:`give_run_config`)

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """The run config flattened (`data.batch_size`, as in MLflow) when given; else Lightning's hparams."""
        if self.run_config is None:
            super().log_hyperparams(params)
            return

        if is_rank_zero():  # a resumed run's config takes this attempt's values (W&B allows the change)
            self.experiment.config.update(flatten(self.run_config), allow_val_change=True)

    def log_run_files(self, run_dir: Path, result: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        """The config, overrides, provenance (and diff) as run files; the best checkpoint's path and the commit in
        the summary; then the run is finished."""
        run = self.experiment
        for path in run_files(run_dir):
            run.save(str(path), base_path=str(run_dir), policy="now")
        best = result.get("best_checkpoint") or result.get("last_checkpoint")
        run.summary["best_checkpoint"] = str(best or "")
        commit = (record.get("git") or {}).get("commit")
        if commit:
            run.summary["git_commit"] = commit
        # the last use: finish now, so the record on disk is complete when the job returns (W&B would finish it from
        # an atexit hook, which a process ended by os._exit, as a forked job or a launcher's rank is, never runs)
        run.finish()


def continue_runs(logger_cfg: Mapping[str, Any] | None, tracker_runs: Mapping[str, str]) -> Any:
    """The logger group with each tracker's `run_id` filled from a resumed checkpoint (where the config leaves it null).

    `tracker_runs`: {tracker name: run id}, what litforge.callbacks.provenance stored in the checkpoint; the entry of
    the same name in `logger=` (e.g. `mlflow`) continues that run.
    """
    if not logger_cfg or not tracker_runs:
        return logger_cfg
    out = {}
    for name, item in logger_cfg.items():
        if isinstance(item, Mapping) and "run_id" in item and item.get("run_id") is None and name in tracker_runs:
            item = {**item, "run_id": tracker_runs[name]}
        out[name] = item
    return out


def give_run_config(loggers: list[Any], run_config: Mapping[str, Any]) -> None:
    """Hand the resolved run config to every tracker that logs it as params (Lightning gives them hparams only)."""
    for lg in loggers:
        if isinstance(lg, Tracker):
            lg.run_config = run_config


def log_run_files(loggers: list[Any], run_dir: Path, result: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    """Hand the run's files to every tracker that takes them (after provenance.json has its end time)."""
    for lg in loggers:
        if isinstance(lg, Tracker):
            lg.log_run_files(run_dir, result, record)
