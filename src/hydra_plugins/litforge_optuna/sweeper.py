"""A Hydra sweeper driven by Optuna's ask/tell API: TPE sampling, a persistent study, failed trials recorded.

Each batch of `n_jobs` trials is asked from the study, turned into Hydra overrides, launched through the configured
launcher (in-process by default, in parallel with `hydra/launcher=joblib`, on a cluster with submitit), and every
outcome is told back: the job's return value, or FAIL when the job raised or returned no finite number, so one
broken trial never ends the study. The study lives in a database (SQLite in the sweep folder by default): an
interrupted sweep resumes where it stopped, and a finished one can be inspected with Optuna's tools. After every
batch `best.yaml` in the sweep folder holds the best parameters, their score and the command that reproduces them.

With `pruner=median|hyperband` each trial's config gets the pruning callback (litforge.callbacks.optuna_pruning),
which reports the objective after every validation and marks a hopeless trial PRUNED in the study itself; the
sweeper then leaves that trial as it is, marks its job PRUNED in the sweep summary and ranks only completed trials.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, OverrideType, RangeSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from litforge.runtime.compat import job_error
from litforge.runtime.override_text import override_text

log = logging.getLogger(__name__)

DIRECTIONS: dict[str, Literal["maximize", "minimize"]] = {
    "max": "maximize",
    "maximize": "maximize",
    "min": "minimize",
    "minimize": "minimize",
}
BEST_FILE = "best.yaml"
PRUNING_KEY = "callbacks.optuna_pruning"  # where each trial's config gets the pruning callback


class SearchSpaceError(ValueError):
    """A search-space entry Optuna cannot sample: the message names the parameter and the accepted forms."""


EMPTY_SPACE = (
    "hydra.sweeper.params: the search space is empty; set hydra.sweeper.params (see "
    "conf/hparams_search/digits_optuna.yaml) or pass a sweep such as optimizer.lr='interval(1e-4,1e-1)'"
)


class LitforgeOptunaSweeper(Sweeper):
    def __init__(
        self,
        direction: str,
        study_name: str,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        sampler: Mapping[str, Any],
        params: Mapping[str, str] | None,
        pruner: str = "none",
        pruner_args: Mapping[str, Any] | None = None,
    ) -> None:
        check_settings(direction, n_trials, n_jobs, pruner, pruner_args, storage)
        self.direction = DIRECTIONS[str(direction).lower()]
        self.study_name = study_name
        self.storage = storage
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.sampler_cfg = plain_mapping("sampler", sampler)
        self.params = {str(k): str(v) for k, v in (params or {}).items()}
        self.pruner = str(pruner).lower()
        self.pruner_args = plain_mapping("pruner_args", pruner_args or {})
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[Any]:
        import optuna
        from optuna.trial import TrialState

        assert self.config is not None
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        space, fixed = search_space(self.params, arguments)
        if not space:
            raise SearchSpaceError(EMPTY_SPACE)
        from litforge.records.optuna_study import build_pruner, study_storage

        url = self._storage_url()
        study = optuna.create_study(
            study_name=self.study_name,
            storage=study_storage(url) if url else None,
            sampler=self._sampler(),
            pruner=build_pruner(self.pruner, self.pruner_args),
            direction=self.direction,
            load_if_exists=True,
        )
        fail_stale_trials(study)
        log.info(
            "Optuna study %r (%s, %s, pruner %s): %d of %d trials done; searching %s",
            self.study_name,
            self.direction,
            url or "in memory",
            self.pruner,
            finished_count(study),
            self.n_trials,
            ", ".join(space),
        )

        returns: list[Any] = []
        while (done := finished_count(study)) < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - done))]
            batch = [
                tuple(fixed + trial_overrides(trial.params) + self._pruning_overrides(trial.number)) for trial in trials
            ]
            try:
                self.validate_batch_is_legal(batch)
            except Exception as exc:  # a search-space key the config does not have: no job could ever run
                for trial in trials:
                    trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
                    study.tell(trial, state=TrialState.FAIL)
                raise
            # job folder N = trial N (trial numbers in a batch asked here are consecutive)
            results = self.launcher.launch(batch, initial_job_idx=trials[0].number)
            for trial, result in zip(trials, results, strict=True):
                value, error = job_outcome(result)
                if (pruned := finished_trial(study, trial.number)) is not None:  # the trial's callback pruned it
                    note_pruned(pruned, result, sweep_dir, error)
                elif error is None:
                    study.tell(trial, value)
                else:
                    log.warning("Trial %d failed (recorded as FAIL, the study goes on): %s", trial.number, error)
                    trial.set_user_attr("error", error)
                    study.tell(trial, state=TrialState.FAIL)
            returns.extend(results)
            write_best(study, sweep_dir, fixed, self._storage_url(), self._metric_name())
        write_best(study, sweep_dir, fixed, self._storage_url(), self._metric_name())
        print(f"litforge: Optuna study {self.study_name!r}: {trial_counts_text(study)}; best: {sweep_dir / BEST_FILE}")
        return returns

    # ---- helpers ----------------------------------------------------------------------------------------------------
    def _storage_url(self) -> str | None:
        if not self.storage:
            return None
        if self.storage.startswith("sqlite:///"):  # SQLite creates the file, not its folder
            Path(self.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        return self.storage

    def _pruning_overrides(self, number: int) -> list[str]:
        """The pruning callback for trial `number` (none without a pruner), as one override of the trial's config.

        An override, not an environment variable or a file: it reaches the job with every launcher (in-process,
        joblib's worker processes, submitit's cluster jobs) and is recorded in the job's .hydra/overrides.yaml.
        """
        if self.pruner == "none":
            return []
        url = self._storage_url()
        assert url is not None
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):  # a job may run in another folder
            url = "sqlite:///" + str(Path(url.removeprefix("sqlite:///")).resolve())
        callback = {
            "_target_": "litforge.callbacks.optuna_pruning.OptunaPruning",
            "storage": url,
            "study_name": self.study_name,
            "trial_number": number,
            "monitor": self._metric_name(),
            "pruner": self.pruner,
            "pruner_args": self.pruner_args,
        }
        return [f"++{PRUNING_KEY}={override_text(callback)}"]

    def _sampler(self) -> Any:
        from optuna.samplers import TPESampler

        cfg = dict(self.sampler_cfg)
        extra = cfg.pop("extra", None) or {}
        return TPESampler(**cfg, **extra)

    def _metric_name(self) -> str | None:
        if self.config is None:  # before setup (the trials' config is not known yet)
            return None
        return OmegaConf.select(self.config, "objective.metric", default=None)


def plain_mapping(key: str, value: Any) -> dict[str, Any]:
    """`hydra.sweeper.<key>` as a plain dict, resolved: what Optuna's constructors take as keyword arguments."""
    container = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if not isinstance(container, Mapping):
        raise ValueError(f"hydra.sweeper.{key}={value!r}: use a mapping of argument names to values")
    return {str(k): v for k, v in container.items()}


def search_space(params: Mapping[str, str], arguments: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Optuna distributions for the sweep overrides; every other override is passed unchanged to each trial.

    Command-line arguments come after the config's `params`, so `optimizer.lr=0.01` on the command line fixes a
    parameter the search config would otherwise sample.
    """
    parser = OverridesParser.create()
    lines = [f"{key}={value}" for key, value in params.items()] + list(arguments)
    space: dict[str, Any] = {}
    fixed: dict[str, str] = {}
    for line, override in zip(lines, parser.parse_overrides(lines), strict=True):
        key = _prefix(override) + override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = distribution(key, override)
        else:
            fixed[key] = line  # the override as given (Hydra's `input_line`)
    return space, list(fixed.values())


def check_settings(direction: Any, n_trials: Any, n_jobs: Any, pruner: Any, pruner_args: Any, storage: Any) -> None:
    """The sweeper's own settings, as its constructor and the pre-run check (:func:`check_search_space`) judge them:
    ValueError with one line."""
    from litforge.records.optuna_study import build_pruner

    if str(direction).lower() not in DIRECTIONS:
        raise ValueError(f"hydra.sweeper.direction={direction!r}: use one of max, min (or maximize, minimize)")
    for key, value in (("n_trials", n_trials), ("n_jobs", n_jobs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            example = {"n_trials": 20, "n_jobs": 1}[key]
            raise ValueError(
                f"hydra.sweeper.{key}={value}: expected an integer >= 1, e.g. hydra.sweeper.{key}={example}"
            )
    build_pruner(str(pruner).lower(), plain_mapping("pruner_args", pruner_args or {}))  # an unknown name or argument
    if str(pruner).lower() != "none" and not storage:
        raise ValueError(
            f"hydra.sweeper.pruner={str(pruner).lower()} needs hydra.sweeper.storage (each trial reports "
            "to the study through it): keep the default sqlite:///${hydra.sweep.dir}/optuna.db"
        )


def check_search_space(sweeper: Any, arguments: Sequence[str]) -> None:
    """`sweeper` (the composed `hydra.sweeper`), if it is this one: its search space as `sweep` will read it, asked
    before Hydra starts (by litforge.cli.preflight.check_sweep, which then checks the values each searched key can
    get with the single run's checks): a form Optuna cannot sample, bounds it refuses, or no space at all, in one line
    and no sweep folder."""
    from litforge.core.errors import ConfigError

    if sweeper.get("_target_") != f"{__name__}.{LitforgeOptunaSweeper.__name__}":
        return
    try:
        get = sweeper.get
        unresolved: Any = OmegaConf.to_container(sweeper, resolve=False) if OmegaConf.is_config(sweeper) else sweeper
        settings = (get("direction"), get("n_trials"), get("n_jobs"), get("pruner", "none"), get("pruner_args"))
        check_settings(*settings, unresolved.get("storage"))  # (storage names the sweep folder, which comes later)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        space, _ = search_space({str(k): str(v) for k, v in (sweeper.get("params") or {}).items()}, arguments)
    except SearchSpaceError as exc:
        raise ConfigError(str(exc)) from None
    if not space:
        raise ConfigError(EMPTY_SPACE)


def distribution(key: str, override: Override) -> Any:
    try:
        return _distribution(key, override)
    except SearchSpaceError:
        raise
    except ValueError as exc:  # Optuna's own bounds: low above high, a log scale from 0
        raise SearchSpaceError(
            f"{override.input_line}: {exc}; give the low end first (above 0 for tag(log, ...))"
        ) from None


def _distribution(key: str, override: Override) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    sweep = override.value()
    if isinstance(sweep, ChoiceSweep):
        # choices as override text: Optuna's categoricals hold only scalars, this also allows lists ([64,64])
        return CategoricalDistribution([override_text(x) for x in sweep.list])
    if isinstance(sweep, RangeSweep):
        values = list(override.sweep_iterator())
        ints = [v for v in values if isinstance(v, int)]
        if values and len(ints) == len(values):
            return IntDistribution(ints[0], ints[-1], step=int(sweep.step))
        return CategoricalDistribution([override_text(v) for v in values])
    if isinstance(sweep, IntervalSweep) and sweep.start is not None and sweep.end is not None:
        log_scale = "log" in sweep.tags
        if "int" in sweep.tags:
            return IntDistribution(int(sweep.start), int(sweep.end), log=log_scale)
        return FloatDistribution(float(sweep.start), float(sweep.end), log=log_scale)
    raise SearchSpaceError(
        f"{key}: {override.input_line!r} cannot be sampled; use choice(a,b,...), range(a,b), "
        "interval(a,b), tag(log, interval(a,b)) or tag(int, interval(a,b))"
    )


def trial_overrides(params: Mapping[str, Any]) -> list[str]:
    """A trial's parameters as Hydra overrides (categoricals already are override text)."""
    return [f"{key}={value if isinstance(value, str) else override_text(value)}" for key, value in params.items()]


def job_outcome(result: Any) -> tuple[float | None, str | None]:
    """(value, None) for a job that returned a finite number, else (None, why the trial failed)."""
    from hydra.core.utils import JobStatus

    error = job_error(result)  # raised, or returned by a refused job (litforge.cli.main.run_job)
    if error is not None or result.status != JobStatus.COMPLETED:
        return None, f"{type(error).__name__}: {error}" if error is not None else str(result.status)
    value = result.return_value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, (
            f"the job returned {value!r}, not a number: does the run log the metric named by objective.metric?"
        )
    if not math.isfinite(number):
        return None, f"the job returned {number}"
    return number, None


def finished_count(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)))


def finished_trial(study: Any, number: int) -> Any:
    """Trial `number` as stored, if its job already finished it (the pruning callback marks it PRUNED); else None."""
    from optuna.trial import TrialState

    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    return trial if trial.state == TrialState.PRUNED else None


def note_pruned(trial: Any, result: Any, sweep_dir: Path, error: str | None) -> None:
    """Log a pruned trial and mark its job PRUNED in the sweep summary (its run folder and logs stay as they are)."""
    from litforge.records.sweeps import mark_pruned, write_summary

    log.info(
        "Trial %d pruned after %d validations (%s)",
        trial.number,
        (trial.last_step or 0) + 1,
        "its job then failed: " + error if error else "its run folder is kept",
    )
    hydra_cfg = getattr(result, "hydra_cfg", None)
    job_dir = None
    if isinstance(hydra_cfg, DictConfig):  # a job's return value carries its Hydra config
        job_dir = OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir", default=None)
    if error is None:
        mark_pruned(Path(job_dir) if job_dir else sweep_dir / str(trial.number), trial.last_step)
        write_summary(sweep_dir)


def trial_counts_text(study: Any) -> str:
    from optuna.trial import TrialState

    counts = {
        state: len(study.get_trials(deepcopy=False, states=(state,)))
        for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    }
    return (
        f"{sum(counts.values())} trials: {counts[TrialState.COMPLETE]} complete, "
        f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAIL]} failed"
    )


def fail_stale_trials(study: Any) -> None:
    """Trials left RUNNING by an interrupted sweep never report: record them as failed so the study can go on.

    (A study shared by several sweeps at once should use a server database and Optuna's heartbeat instead.)
    """
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        log.warning("Trial %d was left running by an interrupted sweep: recorded as FAIL", trial.number)
        study.tell(trial.number, state=TrialState.FAIL)


def write_best(study: Any, sweep_dir: Path, fixed: list[str], storage: str | None, metric: str | None) -> None:
    """`best.yaml`: the best trial's parameters, score and a command that reproduces it, plus trial counts."""
    from optuna.trial import TrialState

    from litforge.records.sweeps import atomic_write

    counts = {
        state.name.lower(): len(study.get_trials(deepcopy=False, states=(state,)))
        for state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    }
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    best: dict[str, Any] | None = None
    if complete:
        trial = study.best_trial
        overrides = fixed + trial_overrides(trial.params)
        best = {
            "trial": trial.number,
            "value": trial.value,
            "params": dict(trial.params),
            "job_dir": str(sweep_dir / str(trial.number)),
            "command": "python train.py "
            + " ".join(f"'{o}'" if any(c in o for c in " []()") else o for o in overrides),
        }
    document = {
        "study": study.study_name,
        "storage": storage,
        "direction": study.direction.name.lower(),
        "metric": metric,
        "trials": counts,
        "best": best,
    }
    atomic_write(sweep_dir / BEST_FILE, OmegaConf.to_yaml(OmegaConf.create(document)))


def _prefix(override: Override) -> str:
    return {OverrideType.ADD: "+", OverrideType.FORCE_ADD: "++", OverrideType.DEL: "~"}.get(override.type, "")
