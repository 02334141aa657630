"""Optuna pruning inside a trial's training: report the objective after each validation, stop a hopeless trial.

The litforge Optuna sweeper (`hydra.sweeper.pruner=median|hyperband`) adds this callback to every trial's config
(`++callbacks.optuna_pruning={...}`: the study's storage, its name, the trial number, the metric and the pruner),
because a trial is a Hydra job that may run in another process (joblib, submitit): the study's database is the only
thing it shares with the sweeper. After every validation the callback reports `objective.metric` to the trial
(step = the validation's index, which is the epoch with one validation per epoch: comparable across trials whatever
their batch size, unlike the global step) and asks the pruner; when it says prune, training stops at once
(`trainer.should_stop`) and the trial is marked PRUNED in the study. The job itself ends normally: its run folder,
logs, checkpoints (the best epoch reached) and metrics stay, and the test of the best checkpoint still runs.

Why not optuna-integration's `PyTorchLightningPruningCallback` (optuna-integration 5.0.0): it imports
`lightning.pytorch`, not `pytorch_lightning`, so its class is not a `pytorch_lightning.Callback` and this Trainer
refuses it (and `lightning` is not installed); it raises `optuna.TrialPruned` out of `trainer.fit` on one device,
which would turn the pruned trial into a failed Hydra job with no metrics; and it reads Lightning's private
`trainer._accelerator_connector` to detect DDP.

Under DDP (or any multi-process strategy) only rank 0 opens the study and asks the pruner; its decision is
broadcast (`trainer.strategy.broadcast`), so every rank stops at the same validation.

Checkpoints and resume: the callback changes no weights; a pruned run's best checkpoint is the best epoch it
reached. A trial is never resumed (the sweeper asks for new trials), so the callback keeps no state in checkpoints.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import optuna
import pytorch_lightning as pl
from optuna.trial import TrialState

from litforge.core.errors import ConfigError
from litforge.records.optuna_study import build_pruner, study_storage

log = logging.getLogger(__name__)


class OptunaPruning(pl.Callback):
    """Report `monitor` to Optuna trial `trial_number` of `study_name` after each validation; stop when pruned.

    Example (the sweeper writes this for each trial; by hand only to replay a trial against its study)::

        callbacks:
          optuna_pruning:
            _target_: litforge.callbacks.optuna_pruning.OptunaPruning
            storage: sqlite:////abs/sweep/optuna.db
            study_name: digits_optuna
            trial_number: 3
            monitor: val/acc
            pruner: median
    """

    def __init__(
        self,
        storage: str,
        study_name: str,
        trial_number: int,
        monitor: str,
        pruner: str = "median",
        pruner_args: Mapping[str, Any] | None = None,
    ) -> None:
        build_pruner(pruner, pruner_args)  # a bad name or argument fails when the callback is built, in one line
        self.storage = storage
        self.study_name = study_name
        self.trial_number = int(trial_number)
        self.monitor = monitor
        self.pruner = pruner
        self.pruner_args = dict(pruner_args or {})
        self.reports = 0  # validations reported so far (the next report's step)
        self.pruned_at: int | None = None  # the step at which the trial was pruned
        self._trial: Any = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.is_global_zero:
            self._trial = self._open_trial()

    def _open_trial(self) -> Any:
        storage = study_storage(self.storage)
        study = optuna.load_study(
            study_name=self.study_name, storage=storage, pruner=build_pruner(self.pruner, self.pruner_args)
        )
        frozen = next((t for t in study.get_trials(deepcopy=False) if t.number == self.trial_number), None)
        if frozen is None or frozen.state != TrialState.RUNNING:
            raise ConfigError(
                f"callbacks.optuna_pruning: study {self.study_name!r} has no running trial "
                f"{self.trial_number} ({'not found' if frozen is None else frozen.state.name}); this "
                "callback is added by the Optuna sweeper (hydra.sweeper.pruner), not by hand"
            )
        trial_id = storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name(self.study_name), self.trial_number
        )
        return optuna.trial.Trial(study, trial_id)  # what study.ask() returns, for a trial asked by the sweeper

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if self.monitor not in trainer.callback_metrics:  # the same keys on every rank: all raise together
            raise ConfigError(
                f"objective.metric={self.monitor!r} was not logged at validation (logged: "
                f"{', '.join(sorted(trainer.callback_metrics)) or 'nothing'}): pruning needs the "
                "objective metric every validation; set objective.metric to a val/* metric"
            )
        step, self.reports = self.reports, self.reports + 1
        prune = False
        if trainer.is_global_zero:
            value = float(trainer.callback_metrics[self.monitor])
            if math.isfinite(value):  # Optuna ignores non-finite reports; early stopping handles NaN runs
                self._trial.report(value, step=step)
                prune = self._trial.should_prune()
        prune = bool(trainer.strategy.broadcast(prune, src=0))
        if not prune:
            return
        trainer.should_stop = True
        self.pruned_at = step
        if trainer.is_global_zero:
            self._trial.study.tell(self.trial_number, state=TrialState.PRUNED)
            log.info(
                "Optuna trial %d pruned at validation %d (epoch %d, %s=%.4f)",
                self.trial_number,
                step,
                trainer.current_epoch,
                self.monitor,
                float(trainer.callback_metrics[self.monitor]),
            )
