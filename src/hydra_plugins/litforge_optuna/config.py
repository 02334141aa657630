"""The sweeper's config schema, registered as `hydra/sweeper: litforge_optuna` when Hydra scans its plugins."""

# no `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules, where dataclasses
# cannot resolve string annotations
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class TPESamplerConf:
    """Arguments of `optuna.samplers.TPESampler` (any of its keyword arguments may be added)."""

    seed: Optional[int] = None  # fixes the sequence of suggested parameters
    n_startup_trials: int = 10  # random trials before TPE starts modelling
    multivariate: bool = True  # model the parameters jointly (they interact: lr x batch size)
    extra: Dict[str, Any] = field(default_factory=dict)  # more TPESampler keyword arguments


@dataclass
class LitforgeOptunaSweeperConf:
    _target_: str = "hydra_plugins.litforge_optuna.sweeper.LitforgeOptunaSweeper"
    # The value to optimise is what the task function returns (train.py: the objective metric's final value).
    # max | min | maximize | minimize; the search configs tie it to ${objective.mode}.
    direction: str = "max"
    study_name: str = "litforge"
    # Where the study lives. The default keeps it inside the sweep folder: resume an interrupted study by running
    # the same command with hydra.sweep.dir=<that folder>. Any Optuna storage URL works (a shared database).
    storage: Optional[str] = "sqlite:///${hydra.sweep.dir}/optuna.db"
    n_trials: int = 20  # the study's total: a resumed study only runs the trials it still lacks
    n_jobs: int = 1  # trials launched together per batch (run in parallel by a parallel launcher, e.g. joblib)
    sampler: TPESamplerConf = field(default_factory=TPESamplerConf)
    # none | median | hyperband: stop unpromising trials early. Each trial reports objective.metric after every
    # validation (step = the validation's index: the epoch, with one validation per epoch); needs a storage.
    pruner: str = "none"
    # keyword arguments of the pruner: median -> optuna.pruners.MedianPruner (n_startup_trials: 5 trials before any
    # pruning, n_warmup_steps: 0 validations before a trial can be pruned, interval_steps: 1); hyperband ->
    # HyperbandPruner (min_resource: 1, max_resource: auto, reduction_factor: 3)
    pruner_args: Dict[str, Any] = field(default_factory=dict)
    # The search space, in Hydra's override grammar: choice(a,b), range(1,5), interval(1e-4,1e-1),
    # tag(log, interval(...)), tag(int, interval(...)); a plain value is fixed for every trial.
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper", name="litforge_optuna", node=LitforgeOptunaSweeperConf, provider="litforge"
)
