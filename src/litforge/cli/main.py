"""The one entry point of every job: `python train.py ...` and `litforge train ...` are `main("train")`.

For each job (`train`, `eval`, `predict`, `export`, `generate`) it does the same four things:

1. `--help` alone is answered from the files in conf/ (litforge.cli.help), without starting Hydra or importing torch;
2. the command line is checked before anything slow starts (litforge.cli.preflight: value types and ranges, the log
   folder, `resume=`), so a typo costs a second, not a run;
3. Hydra composes `conf/<job>.yaml` and calls the job function; a user mistake (LitforgeError, or a config error
   from OmegaConf) ends it with a `litforge: error:` line a mistake and exit code 1, never a traceback, the folder as
   it was (none, or a resumed run's untouched: litforge.checkpointing.folders.undo_refused);
4. a one-screen summary: metrics, what was written where, how to look at it.

Run in a project of the user's own (a `pyproject.toml` with `[tool.litforge]`, litforge.cli.project), the
project's config folder comes first on the search path and its top config is the one composed, as if
`--config-dir conf --config-name <top>` had been typed.

Kept free of torch and Lightning imports at module level: composing a config (and `--cfg job`) must stay fast.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from litforge.checkpointing.folders import undo_noted_folder
from litforge.cli.command_line import null_groups_removed, put_users_first
from litforge.cli.habits import load_env_file
from litforge.cli.help import answer_help
from litforge.cli.project import find_project
from litforge.core.errors import LitforgeError, TrainingStopped
from litforge.jobs.build import too_few_batches
from litforge.parallel.launch import launched_ranks_cleaned_up
from litforge.records.sweeps import job_sweep_values
from litforge.runtime.ranks import in_multirun, is_rank_zero

# litforge's configs: the package `litforge.conf` (in a clone, src/litforge/conf is a symlink to the top-level conf/;
# a wheel carries the files). Hydra composes them through the search-path plugin (hydra_plugins.litforge_searchpath,
# `pkg://litforge.conf`); this folder is what the fast `--help` and the checks before Hydra read.
CONF_DIR = (Path(__file__).resolve().parents[1] / "conf").resolve()

# job name (= conf/<name>.yaml and <name>.py) → (module, function); every job is a plain function of the config
JOBS: dict[str, tuple[str, str]] = {
    "train": ("litforge.jobs.train", "train"),
    "eval": ("litforge.jobs.eval", "evaluate"),
    "predict": ("litforge.jobs.predict", "predict"),
    "export": ("litforge.jobs.export", "export"),
    "generate": ("litforge.jobs.generate", "generate"),
    "prepare": ("litforge.jobs.prepare", "prepare"),  # python prepare.py: LitData shards
}


def main(job_name: str, command: str | None = None) -> None:
    """Run job `job_name` from the command line in `sys.argv`; `command`: how the user typed it (for `--help`)."""
    from litforge.cli.preflight import prepare_command_line  # after --help: pydantic and the config check, ~0.2 s

    if job_name not in JOBS:
        raise ValueError(f"unknown job {job_name!r}; known: {', '.join(JOBS)}")
    try:
        project = find_project()
    except LitforgeError as exc:
        print(f"litforge: error: {exc}", file=sys.stderr)
        sys.exit(1)
    answer_help(job_name, CONF_DIR, command=command, project=project)  # `--help` alone: fast, without Hydra
    if project is not None:
        sys.argv[1:] = project.arguments(job_name, sys.argv[1:])
    load_env_file()  # .env: secrets such as WANDB_API_KEY, never over the environment (docs/migrating.md)
    sys.argv[1:] = null_groups_removed(CONF_DIR, sys.argv[1:])  # logger=null: no logger (Hydra's ~logger)
    prepare_command_line(CONF_DIR, job_name)  # early checks (value types and ranges, log folder), resume=
    put_users_first(sys.argv[1:])  # the user's config folders before litforge's: their options win

    def task_function(cfg: DictConfig) -> float | Exception | None:
        result = run_job(job_function(job_name), cfg, job_name)
        if isinstance(result, Exception):  # a sweep's refused job: its line is out; the summary records it
            return result
        print_summary(job_name, result)
        return (result.get("objective") or {}).get("value")  # what a sweeper (Optuna) optimises

    # config_path=None: litforge's configs come from the search-path plugin, as in any application that uses them
    hydra.main(config_path=None, config_name=job_name, version_base="1.3")(task_function)()


def job_function(job_name: str) -> Callable[[DictConfig], dict[str, Any]]:
    """The job's function, imported only when it runs (importing a job imports torch and Lightning)."""
    module, name = JOBS[job_name]
    return getattr(importlib.import_module(module), name)


def run_job(job: Callable[[DictConfig], Any], cfg: DictConfig, job_name: str = "train") -> Any:
    """Run a job; a user mistake (LitforgeError) ends it with its message and exit code 1, not a traceback.

    In a multirun its one line names the job, and the error is returned, not raised: the sweep goes on without Hydra's
    "Error executing job" traceback, and litforge.records.sweeps records the job as FAILED with its reason.
    """
    from litforge.runtime.devices import apply_threads  # torch: the job's module has imported it by now

    quiet_library_chatter()
    try:  # threads sized before any parallel work (torch refuses a later inter-op size)
        trainer = OmegaConf.to_container(cfg.trainer, resolve=True) if "trainer" in cfg else {}
        threads = apply_threads(cfg.threads, trainer)  # type: ignore[arg-type]
        if is_rank_zero():
            print_config(cfg) if cfg.print_config else print_start(
                job_name, job_name == "train" and cfg.dry_run, threads
            )
        with launched_ranks_cleaned_up():
            return job(cfg)
    except Exception as error:
        exc = too_few_batches(error) or error  # Lightning's `limit_val_batches=0.2` of one batch: one line
        if not isinstance(exc, (LitforgeError, OmegaConfBaseException)):
            raise
        lines = exc.lines if isinstance(exc, LitforgeError) else [config_error_message(exc)]  # one a mistake
        if in_multirun():
            swept = " ".join(f"{k}={v}" for k, v in (job_sweep_values() or {}).items())
            which = f"sweep job {HydraConfig.get().job.num} ({swept})"
            print(f"litforge: error: {which}: {'; '.join(lines)}", file=sys.stderr) if is_rank_zero() else None
            return exc
        said = "\n".join(f"litforge: error: {line}" for line in lines)
        to_run_log(said)  # once on the console: the log file keeps it (a refused run's folder goes back as it was)
        if is_rank_zero() and not isinstance(exc, TrainingStopped):  # a refusal writes nothing (checkpointing.folders)
            undo_noted_folder()
        print("\n" + said, file=sys.stderr)
        sys.exit(exc.exit_code if isinstance(exc, TrainingStopped) else 1)


def config_error_message(exc: OmegaConfBaseException) -> str:
    """OmegaConf's errors carry the offending key; say which value to pass."""
    key = exc.full_key
    if isinstance(exc, MissingMandatoryValue) and key:
        return f"`{key}` has no value and is required: pass {key}=<value> on the command line"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"invalid config{f' at `{key}`' if key else ''}: {first}"


class _DropLines(logging.Filter):
    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet_library_chatter() -> None:
    """Drop Lightning's advertising tips and a deprecation warning it triggers inside torch: noise in every run."""
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_DropLines("💡 Tip"))
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")


def print_start(job_name: str, dry_run: bool, threads: str) -> None:
    """A short start: the job, the option of each group, the CPU threads, and the run folder (the whole config:
    print_config=true; it is also saved in <run folder>/.hydra/config.yaml)."""
    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    chosen = {g: c for g, c in hydra_cfg.runtime.choices.items() if c is not None and not g.startswith("hydra")}
    order = ["experiment", "data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer"]
    groups = sorted(chosen, key=lambda g: order.index(g) if g in order else len(order))
    where = "dry run: no run folder" if dry_run else f"run folder:\n{hydra_cfg.runtime.output_dir}"
    print(f"{job_name}: {' '.join(f'{g}={chosen[g]}' for g in groups)}\n{threads}\n{where}", flush=True)
    for group in groups:  # an option of the user's named like one of litforge's: theirs is used, and said once
        file = f"{group}/{chosen[group]}.yaml"
        users = [Path(s.path) / file for s in hydra_cfg.runtime.config_sources if s.provider == "litforge-user"]
        if (CONF_DIR / file).is_file() and (mine := next((p for p in users if p.is_file()), None)):
            mine = mine.relative_to(Path.cwd()) if mine.is_relative_to(Path.cwd()) else mine
            print(f"{group}={chosen[group]}: your {mine} (shadows litforge's)", flush=True)


def print_config(cfg: DictConfig) -> None:
    from rich import console, syntax, tree  # rich (~0.07 s) only where it prints: not on --help's or a refusal's path

    root = tree.Tree("config", guide_style="dim")
    for key, value in cfg.items():
        text = OmegaConf.to_yaml(value, resolve=True) if OmegaConf.is_config(value) else str(value)
        root.add(f"[bold]{key!s}[/]").add(syntax.Syntax(text.rstrip(), "yaml", background_color="default"))
    console.Console().print(root)


SUMMARY_TITLES = {"train": "train: final metrics"}


def print_summary(job_name: str, result: dict[str, Any]) -> None:
    """One screen at the end of a job: metrics, then each path a user needs next, whole on a line of its own (plain
    print: rich would wrap a long path where the output is not a terminal, and a log could not be copied from), and
    only for a file that is there. The same lines end the job's log file (`<run folder>/<job>.log`)."""
    if not is_rank_zero():
        return
    from rich import console, table  # rich (~0.07 s) only where it prints: not on --help's or a refusal's path

    metrics = result.get("metrics") or {}
    if metrics:
        shown = table.Table(title=SUMMARY_TITLES.get(job_name, job_name), show_header=True, header_style="bold")
        shown.add_column("metric")
        shown.add_column("value", justify="right")
        for name, value in metrics.items():
            shown.add_row(name, f"{value:.4f}" if isinstance(value, float) else str(value))
        console.Console().print(shown)
    lines: list[str] = []
    for label, key in (
        ("best checkpoint", "best_checkpoint"),
        ("last checkpoint", "last_checkpoint"),
        ("run folder", "output_dir"),
        ("written", "written"),
    ):
        paths = result.get(key) or []
        lines += [f"{label}:\n{p}" for p in ([paths] if isinstance(paths, str) else paths) if Path(p).exists()]
    if result.get("tested"):
        lines.append(f"tested: {result['tested']}")
    if result.get("trained_at_commit"):
        lines.append(f"trained at commit: {result['trained_at_commit']}")
    run_dir = Path(str(result.get("output_dir", "")))
    view = job_name == "train" and bool(result.get("output_dir")) and not in_multirun()  # a sweep: one at its end
    if view and next(run_dir.rglob("events.out.tfevents.*"), None):
        lines.append(f"view it:\ntensorboard --logdir {run_dir} --host 127.0.0.1")
    print("\n".join(lines))
    to_run_log("\n".join([*(f"{n}: {v}" for n, v in metrics.items()), *lines]))  # the run's log keeps the summary


def to_run_log(text: str) -> None:
    """`text` into the run's log file (Hydra's file handler) only: it is on the console already."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            handler.stream.write(text + "\n")
            handler.flush()
