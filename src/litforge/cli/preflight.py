"""Checks that run before Hydra starts a job, so a mistake costs a second, not an hour of training.

`prepare_command_line(conf_dir, config_name)` is called by the entry scripts just before `@hydra.main` takes over:

1. it refuses command lines that would run something other than what was meant, each with the fix: a sweep
   (`optimizer.lr=0.1,0.01`) or `hparams_search=...` without `-m` (Hydra would run one job, or none), an option
   that does not exist (`model=resnt`), a key the config does not have (`trainer.max_epoch=3`);
2. it composes the config with Hydra's own Compose API (torch-free, about a tenth of a second) and checks every
   value in it against the rule table of litforge.config.validation (type and range, a required `???` left out, keys
   that moved), and the type of each `key=value` override against that key's default where the table has no rule;
   then binds each `_target_` node to its target's annotated signature (litforge.config.signatures), and asks what
   a job would otherwise refuse only after Hydra made its run folder (another run's folder as hydra.run.dir, an
   image folder of one class, an unprepared streaming folder, the finders, prepare's source);
3. it checks that `paths.log_dir` is a writable folder with at least `paths.min_free_mb` free: Hydra would otherwise
   fail with a traceback when it creates the run folder, or the run would die at its first checkpoint;
4. for `resume=...` (train only) it finds the run folder to continue and rewrites the command line so Hydra reuses
   that folder (`hydra.run.dir`) with that run's own overrides (your new ones win): logs, TensorBoard events and
   checkpoints of the resumed run continue in one place.

With `-m` it refuses only what would fail every job alike (an unknown option, `resume=`); each job checks its own
values, so a sweep records a failed job and goes on. Anything it cannot judge (`--cfg`, `--help`, other config paths, a
config that does not compose) is left to Hydra, whose own error messages then apply. Every failure is one
`litforge: error: ...` line and exit code 1.
"""

from __future__ import annotations

import difflib
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing.folders import check_folder
from litforge.config.validation import MOVED_KEYS, check_config, moved_key_message, rule_for, shown
from litforge.core.errors import ConfigError, LitforgeError
from litforge.runtime.ranks import is_rank_zero, register_resolvers

log = logging.getLogger("litforge")

# flags after which Hydra does not run a job: nothing to check
_NO_JOB_FLAGS = {
    "--help",
    "-h",
    "--hydra-help",
    "--cfg",
    "-c",
    "--info",
    "-i",
    "--shell-completion",
    "-sc",
    "--version",
    "--resolve",
    "--experimental-rerun",
}
# flags that change what Hydra composes: leave those command lines to Hydra
_OTHER_FLAGS = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--package", "-p"}
_MULTIRUN_FLAGS = {"--multirun", "-m"}


def prepare_command_line(conf_dir: str | Path, config_name: str, argv: list[str] | None = None) -> None:
    """Validate the command line in `argv` (default `sys.argv`) and rewrite it in place for `resume=`."""
    argv = sys.argv if argv is None else argv
    args = argv[1:]
    if not is_rank_zero():  # a DDP rank Lightning launched: rank 0 already checked (and rewrote) this command line
        return
    flags = {a.split("=")[0] for a in args if a.startswith("-")}
    if flags & (_NO_JOB_FLAGS | _OTHER_FLAGS):
        return
    try:
        if flags & _MULTIRUN_FLAGS:
            check_sweep(Path(conf_dir), config_name, [a for a in args if not a.startswith("-")])
            return
        new_args = checked_overrides(Path(conf_dir), config_name, args)
    except LitforgeError as exc:
        print(f"\nlitforge: error: {exc}", file=sys.stderr)
        sys.exit(1)
    argv[1:] = new_args


def checked_overrides(conf_dir: Path, config_name: str, overrides: list[str]) -> list[str]:
    """The overrides to hand to Hydra, after the checks above; raises ConfigError for a mistake."""
    parsed = _parse(overrides)
    if parsed is None:
        return overrides  # Hydra reports syntax errors itself
    check_moved(parsed)
    check_needs_multirun(parsed, config_name)
    groups = [o for o in parsed if _is_group(conf_dir, o) and not _is_hydra(o)]
    values = [o for o in parsed if not _is_group(conf_dir, o) and not _is_hydra(o)]
    check_group_options(conf_dir, groups, searchpath=_extends_searchpath(parsed))
    cfg = _compose(conf_dir, config_name, [o.input_line for o in [*groups, *values]])
    # the defaults (the group choices alone), composed only when needed: a key that does not exist is named with the
    # closest that does (the rest Hydra judges), and a key no rule or signature judges keeps its default's kind
    unjudged = [o for o in values if rule_for(o.key_or_group) is None and not (o.is_add() or o.is_force_add())]
    baseline = _compose(conf_dir, config_name, [o.input_line for o in groups]) if cfg is None or unjudged else None
    if cfg is None:
        message = next(
            filter(
                None,
                (
                    unknown_key_message(baseline, o)
                    for o in values
                    if baseline is not None and not (o.is_add() or o.is_force_add())
                ),
            ),
            None,
        )
        if message:
            raise ConfigError(message)
        return overrides
    check_config(cfg)  # the table, then each `_target_`'s signature
    if baseline is not None:
        check_value_types(baseline, cfg, unjudged)  # the kind of the default, for what neither judges
    check_run_folder(parsed, cfg)
    check_data_folder(cfg)
    check_job(cfg, config_name)
    paths = cfg.get("paths") or {}
    if paths.get("log_dir"):
        check_folder(Path(str(paths.log_dir)), float(paths.get("min_free_mb") or 0), key="paths.log_dir")
    if config_name == "train":
        return resume_overrides(cfg, parsed, overrides)
    return overrides


def check_sweep(conf_dir: Path, config_name: str, overrides: list[str]) -> None:
    """`-m`: what would fail every job alike (an option that does not exist, a moved key, `resume=`).

    The values are left to the jobs, each of which checks its own config where its groups are built: a sweep
    records a job that fails (e.g. one value of `model.dropout=choice(0.1,1.5)`) and goes on with the others.
    """
    parsed = _parse(overrides)
    if parsed is None:
        return
    check_moved(parsed)
    check_group_options(
        conf_dir,
        [o for o in parsed if _is_group(conf_dir, o) and not _is_hydra(o)],
        searchpath=_extends_searchpath(parsed),
    )
    for override in parsed:
        if override.key_or_group == "resume" and config_name == "train" and override.value() is not None:
            raise ConfigError(
                "resume= continues one run; a sweep's jobs each take ckpt_path=<file> instead (or drop -m)"
            )


# ---- command lines that would not run what was meant --------------------------------------------------------------
def check_moved(parsed: list[Any]) -> None:
    for override in parsed:
        if override.key_or_group in MOVED_KEYS:
            raise ConfigError(
                moved_key_message(
                    override.key_or_group,
                    override.get_value_element_as_str() if not override.is_sweep_override() else "<value>",
                )
            )


def check_needs_multirun(parsed: list[Any], config_name: str) -> None:
    """A sweep or a search without `-m`: Hydra refuses the first in four lines and runs the second as one job."""
    from hydra.core.override_parser.types import ChoiceSweep

    for override in parsed:
        if override.is_sweep_override() and not _is_hydra(override):
            line = override.input_line
            as_list = (
                f"; a list value is written {override.key_or_group}=[{line.split('=', 1)[1]}]"
                if isinstance(override.value(), ChoiceSweep) and "(" not in line
                else ""
            )
            raise ConfigError(
                f"{line} is a sweep (one job per value): add -m to run it "
                f"(python {config_name}.py -m {line}), or pass one value{as_list}"
            )
        if override.key_or_group == "hparams_search" and override.value() is not None and not override.is_delete():
            value = override.get_value_element_as_str()
            raise ConfigError(
                f"hparams_search={value} is a search, which runs only as a multirun: add -m "
                f"(python {config_name}.py -m hparams_search={value}); without it the search's "
                "settings would train a single run"
            )


def check_group_options(conf_dir: Path, groups: list[Any], searchpath: bool = False) -> None:
    """`model=resnt`: name the options there are (Hydra lists them one per line, after its search path).
    With `hydra.searchpath=...` options may come from other folders too: then Hydra judges."""
    if searchpath:
        return
    for override in groups:
        if override.package is not None or override.is_delete():
            continue
        group = override.key_or_group
        options = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
        for value in _values(override):
            for name in value if isinstance(value, list) else [value]:
                if isinstance(name, str) and name not in options:
                    match = difflib.get_close_matches(name, options, n=1)
                    hint = f"; did you mean {group}={match[0]}?" if match else ""
                    raise ConfigError(
                        f"{group}={name} is not an option of {group}{hint} (options: {', '.join(options)})"
                    )


def unknown_key_message(cfg: DictConfig, override: Any) -> str | None:
    """`trainer.max_epoch=3`: which part of the key does not exist, and the closest key that does."""
    node: Any = cfg
    path: list[str] = []
    for part in override.key_or_group.split("."):
        if not OmegaConf.is_dict(node):
            return None  # e.g. a group switched off (null): Hydra's message applies
        if part not in node.keys():  # `in node` is False for a key whose value is ??? (to be given)
            match = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1)
            hint = f"; did you mean {'.'.join([*path, match[0]])}?" if match else ""
            where = ".".join(path) or "the config"
            return (
                f"{override.input_line}: {where} has no key `{part}`{hint} "
                f"(+{override.input_line} would add it as a new key)"
            )
        try:
            node = node[part]
        except Exception:
            return None
        path.append(part)
    return None


def check_run_folder(parsed: list[Any], cfg: DictConfig) -> None:
    """`hydra.run.dir=<another run>` would overwrite that run's checkpoints, metrics and overrides: a run writes
    only into a folder of its own (resume= continues one in place; a torchrun restart re-enters its own)."""
    import os

    if cfg.get("resume") or cfg.get("ckpt_path") == "last" or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    for override in parsed:
        if override.key_or_group == "hydra.run.dir" and isinstance(override.value(), str):
            folder = Path(override.value())
            held = [n for n in (".hydra", "checkpoints", "metrics.json") if (folder / n).exists()]
            if held:
                raise ConfigError(
                    f"hydra.run.dir={folder} is the folder of another run (it holds {', '.join(held)}): "
                    f"a run never writes into another's; continue it with resume={folder}, or pass a "
                    "new folder"
                )


def check_data_folder(cfg: DictConfig) -> None:
    """data=image_folder with one class folder: a classifier needs two (torchmetrics would fail inside fit)."""
    data = cfg.get("data") or {}
    root = data.get("root") if str(data.get("_target_", "")).endswith("ImageFolderDataModule") else None
    if not isinstance(root, str) or not Path(root).is_dir():
        return  # the datamodule names a missing folder itself
    train = Path(root) / "train" if (Path(root) / "train").is_dir() else Path(root)
    classes = sorted(p.name for p in train.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) == 1:
        raise ConfigError(
            f"data.root={root} has one class folder ({classes[0]}): a classifier needs two or more; "
            f"add a folder per class, e.g. {train / 'other' / '001.png'}"
        )


def check_job(cfg: DictConfig, config_name: str) -> None:
    """What a job would refuse only after Hydra made its run folder: asked here, of the same functions."""
    data = cfg.get("data") or {}
    streaming = str(data.get("_target_", "")).endswith("StreamingImageDataModule")
    if config_name == "prepare" and (not data or streaming):
        raise ConfigError(
            "prepare needs a source datamodule: pass data=digits, mnist, cifar10 or image_folder "
            "(data=streaming reads what prepare writes)"
        )
    if config_name == "train" and streaming and "://" not in str(data.get("input_dir", "")):
        from litforge.data.streaming import read_facts

        read_facts(data.get("input_dir"))
    if config_name == "export":
        from litforge.jobs.export import check_export

        check_export(cfg)
    if config_name == "train" and (cfg.get("tune") or {}).get("finder", "none") != "none":
        from litforge.jobs.tuning import check_tuning

        check_tuning(cfg)


# ---- value types where the table has no rule ----------------------------------------------------------------------
def check_value_types(baseline: DictConfig, cfg: DictConfig, values: list[Any]) -> None:
    """`key=value` keeps the kind of value of that key's default (number, true/false, list) where the rule table
    has no rule for the key (the table judges the rest, in check_config)."""
    for override in values:
        if override.is_delete() or override.is_add():
            continue
        key = override.key_or_group
        if rule_for(key) is not None:
            continue
        default, value = _select(baseline, key), _select(cfg, key)
        if default is None or value is None or isinstance(value, str) and value.startswith("${"):
            continue
        if isinstance(default, bool):
            kind = "true or false" if not isinstance(value, bool) else None
        elif isinstance(default, (int, float)):
            kind = (
                ("an integer" if isinstance(default, int) else "a number")
                if isinstance(value, str) and not _looks_numeric(value)
                else None
            )
        elif isinstance(default, list):
            kind = "a list" if not isinstance(value, list) else None
        else:
            kind = None
        if kind:
            raise ConfigError(
                f"{key}={shown(value)}: expected {kind} (the default is {shown(default)}); "
                f"pass e.g. {key}={shown(default, quote=False)}, or {key}=null where the key allows none"
            )


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return text.startswith("${")  # an interpolation, resolved later


def _select(cfg: DictConfig, key: str) -> Any:
    """The value at `key` as plain Python (a list stays a list); None for a mapping or what cannot resolve."""
    try:
        node = OmegaConf.select(cfg, key, throw_on_missing=False, throw_on_resolution_failure=False)
        if OmegaConf.is_list(node):
            return OmegaConf.to_container(node, resolve=True)
    except Exception:
        return None
    return node if not OmegaConf.is_config(node) else None


# ---- resume --------------------------------------------------------------------------------------------------------
def resume_overrides(cfg: DictConfig, parsed: list[Any], overrides: list[str]) -> list[str]:
    """Rewrite `resume=...` (or `ckpt_path=last`) into the resumed run's own overrides + `hydra.run.dir=<run>`."""
    from litforge.checkpointing import resume

    log_dir, task_name = str(cfg.paths.log_dir), str(cfg.task_name)
    decided = resume.decide(cfg.get("resume"), cfg.get("ckpt_path"), log_dir, task_name)
    if decided.asked is None:
        return overrides
    mine = [o for o in parsed if o.key_or_group not in ("resume", "ckpt_path")]
    if decided.run_dir is None or decided.checkpoint is None:
        print(
            f"litforge: resume={decided.asked}: no interrupted run under {log_dir}/{task_name}/runs, starting a new "
            "run",
            file=sys.stderr,
        )
        return [o.input_line for o in mine]
    run_dir, ckpt = decided.run_dir, Path(decided.checkpoint)
    print(f"litforge: resuming {run_dir} from {ckpt.name}", file=sys.stderr)
    merged: dict[str, str] = {}
    for line in [*_saved_overrides(run_dir), *(o.input_line for o in mine)]:
        key = line.split("=", 1)[0].lstrip("+~")
        if key not in ("resume", "ckpt_path", "hydra.run.dir"):
            merged[key] = line  # later (yours) wins over the run's own
    return [*merged.values(), f"hydra.run.dir={_quote(run_dir)}", f"resume={_quote(ckpt)}"]


def _saved_overrides(run_dir: Path) -> list[str]:
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.exists():
        return []
    return [str(line) for line in (OmegaConf.load(saved) or [])]


# ---- helpers -------------------------------------------------------------------------------------------------------
def _compose(conf_dir: Path, config_name: str, overrides: list[str]) -> DictConfig | None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()  # the ${uid:} resolver used by hydra.run.dir

    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()


def _quote(path: Path) -> str:
    """A path as a quoted Hydra override value (paths may hold characters the override grammar reserves)."""
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _parse(overrides: list[str]) -> list[Any] | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return None


def _values(override: Any) -> list[Any]:
    """The values an override hands to its jobs: one, or each of a choice/range sweep (an interval: none here)."""
    if not override.is_sweep_override():
        return [override.value()]
    try:
        return list(override.sweep_iterator())
    except Exception:
        return []


def _extends_searchpath(parsed: list[Any]) -> bool:
    return any(o.key_or_group.startswith("hydra.searchpath") for o in parsed)


def _is_hydra(override: Any) -> bool:
    return override.key_or_group.split(".")[0].split("/")[0] == "hydra"


def _is_group(conf_dir: Path, override: Any) -> bool:
    key = override.key_or_group
    return "." not in key and (conf_dir / key).is_dir()
