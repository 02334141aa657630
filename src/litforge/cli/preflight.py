"""Checks that run before Hydra starts a job, so a mistake costs a second, not an hour of training.

`prepare_command_line` (called by the entry just before `@hydra.main`) refuses a command line that would run something
other than what was meant (a sweep or `hparams_search=` without `-m`, an option or key that does not exist, a moved
key), then runs the job's declared checks on the composed config (litforge.jobs.checks: the config check, and what a
job would refuse only after Hydra made its run folder). `resume=` is rewritten to continue that run in its folder. With
`-m` every job gets the same checks before the first starts (:func:`check_sweep`). A `litforge: error:` line a mistake.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

from hydra.core.override_parser.types import ChoiceSweep, Override
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.litforge_optuna.sweeper import check_search_space
from hydra_plugins.litforge_slurm import check_launcher
from litforge.checkpointing.folders import check_folder, check_not_another_run, check_paths_in_folders
from litforge.checkpointing.resume import resume_command_line, slurm_job_run
from litforge.cli import hints
from litforge.cli.command_line import compose, is_group, is_hydra, parse, split_config_flags, sweep_jobs, typed, values
from litforge.cli.habits import check_habits
from litforge.cli.help import group_options, user_conf_folders
from litforge.cli.hints import absent_group_message, check_added_keys, check_syntax, unknown_key_message
from litforge.config.relations import MOVED_KEYS, moved_key_message
from litforge.core.errors import ConfigError, LitforgeError, raise_found, refuse_each
from litforge.jobs.checks import check_job, note_download
from litforge.runtime.extras import check_extras
from litforge.runtime.ranks import is_rank_zero

# flags after which Hydra runs no job, or composes from elsewhere: left to Hydra
_HYDRA_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--version"}
_HYDRA_FLAGS |= {"--resolve", "--experimental-rerun", "--config-path", "-cp", "--package", "-p"}


def prepare_command_line(conf_dir: str | Path, config_name: str, argv: list[str] | None = None) -> None:
    """Validate the command line in `argv` (default `sys.argv`) and rewrite it in place for `resume=`.

    A project's own top config (`--config-dir <folder> --config-name <name>`, docs/extending.md) is checked the
    same way: its folder joins the search path of the composition that is checked.
    """
    argv = sys.argv if argv is None else argv
    kept, top_dir, top_name, args = split_config_flags(argv[1:])
    flags = {a.split("=")[0] for a in args if a.startswith("-")}
    if not is_rank_zero() or flags & _HYDRA_FLAGS:  # a DDP rank Lightning launched: rank 0 checked this line
        return
    top = Path(top_dir).resolve() if top_dir else None
    argv[1:] = [*kept, *(args := hints.decision_overrides(args, config_name))]  # task.threshold=: eval/predict/export
    try:
        if flags & {"--multirun", "-m"}:
            check_sweep(Path(conf_dir), top_name or config_name, [a for a in args if a[:1] != "-"], top, config_name)
            return
        argv[1:] = [*kept, *checked_overrides(Path(conf_dir), top_name or config_name, args, config_name, top)]
    except LitforgeError as exc:
        print("\n" + "\n".join(f"litforge: error: {line}" for line in exc.lines), file=sys.stderr)
        sys.exit(1)


def checked_overrides(
    conf_dir: Path,
    config_name: str,
    overrides: list[str],
    job: str | None = None,
    top_dir: Path | None = None,
    multirun: bool = False,
    here: bool = True,
) -> list[str]:
    """The overrides to hand to Hydra, after the checks above; raises ConfigError for a mistake. `config_name`: the
    top config composed (the job's, or a project's own in `top_dir` that starts from it); `job`: the job (default:
    the same); `multirun`: one job of a sweep (:func:`check_sweep`); `here`: it runs on this machine."""
    job = job or config_name
    parsed = parse(overrides)
    if parsed is None:  # one override Hydra's grammar cannot read: named in one line (else Hydra's message)
        check_syntax(overrides)
        return overrides
    groups = [o for o in parsed if is_group(conf_dir, o) and not is_hydra(o)]
    raise_found(
        refuse_each(
            [],
            lambda: check_needs_multirun([] if multirun else parsed, job),  # a sweep's job: check_sweep
            lambda: check_options(conf_dir, parsed, job, top_dir),
        )
    )  # each mistake of the command line's shape; the config needs them gone
    keys = [o for o in parsed if not is_group(conf_dir, o) and not is_hydra(o)]
    # the user's config folders (hydra.searchpath) take part: their options compose and are checked like conf/'s
    searchpath = [o for o in parsed if o.key_or_group == "hydra.searchpath"]
    cfg = compose(conf_dir, config_name, typed([*searchpath, *groups, *keys]), top_dir)
    found: list[LitforgeError] = []
    if cfg is None:  # a key that does not exist: named with the closest that does (the rest Hydra judges)
        baseline = compose(conf_dir, config_name, typed([*searchpath, *groups]), top_dir)
        extra = user_conf_folders(typed(searchpath), top_dir)
        unknown = {
            line: m
            for o, line in zip(keys, typed(keys), strict=True)
            if baseline and (m := unknown_key_message(baseline, o, job, conf_dir, extra))
        }
        if not unknown and (absent := absent_group_message(conf_dir, config_name, searchpath, groups, job)):
            raise ConfigError(absent)  # predict: logger=
        found = [ConfigError(*unknown.values())] if unknown else []  # the other keys: judged without these
        kept = [line for line in typed([*searchpath, *groups, *keys]) if line not in unknown]
        cfg = compose(conf_dir, config_name, kept, top_dir) if found else None
        if cfg is None:
            raise_found(found)
            return overrides
    dry_run = job == "train" and cfg.dry_run
    found = refuse_each(
        found,
        lambda: check_added_keys(cfg, parsed, job),  # +test=false: a top-level key that nothing reads
        lambda: check_paths(cfg, parsed, dry_run),
        lambda: check_run_dir(cfg, parsed, job),
    )
    check_job(
        cfg, job, found, here
    )  # the job's declared checks (litforge.jobs.checks), after these: one line a mistake
    if dry_run:
        return [*overrides, *DRY_RUN_HYDRA]
    recompose = lambda merged: compose(conf_dir, config_name, merged, top_dir)  # noqa: E731  resume= checks these
    return resume_command_line(cfg, parsed, overrides, recompose) if job == "train" and not multirun else overrides


def check_paths(cfg: DictConfig, parsed: list[Override], dry_run: bool) -> None:
    """Every path under a file (output=<a file>/out.csv: refused now, not after the work); then room and write access
    in paths.log_dir (a dry run writes nothing there)."""
    check_paths_in_folders(cfg, parsed)
    if "paths" in cfg and not dry_run:
        check_folder(Path(cfg.paths.log_dir), cfg.paths.min_free_mb, key="paths.log_dir")


def check_run_dir(cfg: DictConfig, parsed: list[Override], job: str) -> None:
    """hydra.run.dir=<another run's folder> (not to continue it): refused, never written into."""
    if not (job == "train" and (cfg.resume or cfg.ckpt_path == "last")):
        own = slurm_job_run(str(cfg.paths.log_dir), str(cfg.task_name)) if job == "train" else None
        for o in parsed:
            if o.key_or_group == "hydra.run.dir" and isinstance(folder := o.value(), str):
                if own is None or Path(folder).resolve() != own.resolve():  # a requeued job's own folder: resumed
                    check_not_another_run(Path(folder))


# dry_run=true writes nothing: Hydra runs in the current folder (which exists), without .hydra/ or a log file
DRY_RUN_HYDRA = ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra.job_logging.handlers.file.filename=/dev/null"]


def check_sweep(
    conf_dir: Path, config_name: str, overrides: list[str], top_dir: Path | None = None, job: str | None = None
) -> None:
    """`-m`: the single run's checks on every value of every swept key, a search space included, before the first job
    starts (which jobs, and why: litforge.cli.command_line.sweep_jobs); first the launcher and sweeper plugins."""
    job, parsed = job or config_name, parse(overrides)
    if parsed is None:
        return check_syntax(overrides)
    lines = []
    for o in parsed:  # what one run only can mean: continue a run, or switch a group off (Hydra: a traceback each)
        key, value = o.key_or_group, o.get_value_element_as_str() if not o.is_sweep_override() else None
        if job == "train" and (key == "resume" and o.value() is not None or key == "ckpt_path" and value == "last"):
            lines.append(
                f"{o.input_line} continues one run; a sweep's jobs each take ckpt_path=<file> instead (or drop -m)"
            )
        if is_group(conf_dir, o) and o.is_sweep_override() and None in values(o):
            lines.append(
                f"{o.input_line}: a sweep cannot switch {key} off in some of its jobs (Hydra has no option null); "
                f"sweep over options only, and run {key}=null as a command of its own"
            )
    found: list[LitforgeError] = [ConfigError(*lines)] if lines else []
    raise_found(refuse_each(found, lambda: check_options(conf_dir, parsed, job, top_dir)))
    cfg = compose(conf_dir, config_name, sweep_jobs(parsed)[0], top_dir, hydra=True)  # its first job
    hydra = OmegaConf.select(cfg, "hydra") or {} if cfg is not None else {}
    sweeper = hydra.get("sweeper") or {}  # its params: the search space (Optuna's), or the grid in the config
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    check_launcher(hydra)
    launcher = str((hydra.get("launcher") or {}).get("_target_", ""))  # SLURM's runs its jobs on other machines
    check_search_space(sweeper, overrides)
    grid = str(sweeper.get("_target_", "BasicSweeper")).endswith("BasicSweeper")  # Hydra's: no interval()
    for lines in sweep_jobs(every := parse([*params, *overrides]) or [], grid):
        checked_overrides(conf_dir, config_name, lines, job, top_dir, True, "slurm" not in launcher.lower())
        note_download(compose(conf_dir, config_name, lines, top_dir), lines, every)


# ---- command lines that would not run what was meant --------------------------------------------------------------
def check_options(conf_dir: Path, parsed: list[Override], job: str, top_dir: Path | None) -> None:
    """Each moved key, group whose extra is not installed, other template's spelling and option that does not exist."""
    moved = [o for o in parsed if o.key_or_group in MOVED_KEYS]
    lines = [
        moved_key_message(o.key_or_group, "<value>" if o.is_sweep_override() else o.get_value_element_as_str())
        for o in moved
    ]
    found = refuse_each(
        [ConfigError(*lines)] if lines else [],
        lambda: check_extras(parsed, job),
        lambda: check_habits(conf_dir, parsed),  # lightning-hydra-template's spellings (docs/migrating.md)
    )
    said = [line for exc in found for line in exc.lines]  # an override refused above is not judged again below
    groups = [o for o in parsed if is_group(conf_dir, o) and not is_hydra(o)]
    groups = [o for o in groups if not any(line.startswith(f"{o.input_line}:") for line in said)]
    extra = user_conf_folders(typed(parsed), top_dir)
    raise_found(refuse_each(found, lambda: check_group_options(conf_dir, groups, extra)))


def check_needs_multirun(parsed: list[Override], config_name: str) -> None:
    """Each sweep, search or launcher without `-m`: Hydra refuses the first in four lines and runs the others as one
    job, here."""
    lines = []
    for override in parsed:
        key, line = override.key_or_group, override.input_line or ""
        if override.is_sweep_override() and not is_hydra(override):
            listed = isinstance(override.value(), ChoiceSweep) and "(" not in line
            as_list = f"; a list value is written {key}=[{line.split('=', 1)[1]}]" if listed else ""
            lines.append(
                f"{line} is a sweep (one job per value): add -m to run it (python {config_name}.py -m {line}), or "
                f"pass one value{as_list}"
            )
        elif key in ("hparams_search", "hydra/launcher", "hydra/sweeper") and not override.is_delete():
            value = override.get_value_element_as_str()
            lines.append(
                f"{key}={value} is used only by a multirun: add -m (python {config_name}.py -m {key}={value}); "
                "without it a single run would train here, with no search and no launcher"
            )
    if lines:
        raise ConfigError(*lines)


def check_group_options(conf_dir: Path, groups: list[Override], extra: Sequence[Path] = ()) -> None:
    """`model=resnt`: name the options there are, conf/'s and those of the user's own config folders (Hydra lists
    them one per line, after its search path); every such option of the command line."""
    lines = []
    for override in [o for o in groups if o.package is None and not o.is_delete()]:
        group = override.key_or_group
        options = group_options(group, conf_dir, extra)
        for value in values(override):
            for name in value if isinstance(value, list) else [value]:
                if isinstance(name, str) and name not in options:
                    match = difflib.get_close_matches(name, options, n=1)
                    hint = f"; did you mean {group}={match[0]}?" if match else ""
                    lines.append(f"{group}={name} is not an option of {group}{hint} (options: {', '.join(options)})")
    if lines:
        raise ConfigError(*lines)
