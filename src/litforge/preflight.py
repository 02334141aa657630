"""Checks that run before Hydra starts a job, so a mistake costs a second, not an hour of training.

`prepare_command_line(conf_dir, config_name)` is called by the entry scripts just before `@hydra.main` takes over:

1. it composes the config the way Hydra will (torch-free, about a tenth of a second);
2. it refuses values of the wrong type (`trainer.max_epochs=abc`: Hydra passes any text through) by comparing each
   `key=value` override with the type of that key's default;
3. it checks that `paths.log_dir` is a writable folder with at least `paths.min_free_mb` free: Hydra would otherwise
   fail with a traceback when it creates the run folder, or the run would die at its first checkpoint;
4. for `resume=...` (train only) it finds the run folder to continue and rewrites the command line so Hydra reuses
   that folder (`hydra.run.dir`) with that run's own overrides (your new ones win): logs, TensorBoard events and
   checkpoints of the resumed run continue in one place.

Anything it cannot judge (multirun sweeps, `--cfg`, `--help`, a config that does not compose) is left to Hydra,
whose own error messages then apply. Every failure is one `litforge: error: ...` line and exit code 1.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from litforge.errors import ConfigError, LitforgeError
from litforge.folders import check_folder
from litforge.runtime import is_rank_zero, register_resolvers
from litforge.validation import MOVED_KEYS, moved_key_message

log = logging.getLogger("litforge")

# flags after which Hydra does not run a job: nothing to check
_NO_JOB_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
                 "--version", "--resolve", "--experimental-rerun"}
# flags that change what or how Hydra composes: leave those command lines to Hydra
_OTHER_FLAGS = {"--multirun", "-m", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                "--package", "-p"}


def prepare_command_line(conf_dir: str | Path, config_name: str, argv: list[str] | None = None) -> None:
    """Validate the command line in `argv` (default `sys.argv`) and rewrite it in place for `resume=`."""
    argv = sys.argv if argv is None else argv
    args = argv[1:]
    if not is_rank_zero():  # a DDP rank Lightning launched: rank 0 already checked (and rewrote) this command line
        return
    if any(a.split("=")[0] in _NO_JOB_FLAGS | _OTHER_FLAGS for a in args if a.startswith("-")):
        return
    try:
        new_args = checked_overrides(Path(conf_dir), config_name, args)
    except LitforgeError as exc:
        print(f"\nlitforge: error: {exc}", file=sys.stderr)
        sys.exit(1)
    argv[1:] = new_args


def checked_overrides(conf_dir: Path, config_name: str, overrides: list[str]) -> list[str]:
    """The overrides to hand to Hydra, after the checks above; raises ConfigError for a mistake."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return overrides  # Hydra reports syntax errors itself
    for override in parsed:
        if override.key_or_group in MOVED_KEYS:
            raise ConfigError(moved_key_message(override.key_or_group, override.get_value_element_as_str()
                                                if not override.is_sweep_override() else "<value>"))
    if any(o.is_sweep_override() for o in parsed):
        return overrides
    # one composition with the group choices (the defaults of every key), then the key=value overrides on a copy
    groups = [o for o in parsed if _is_group(conf_dir, o) and not _is_hydra(o)]
    values = [o for o in parsed if not _is_group(conf_dir, o) and not _is_hydra(o)]
    baseline = _compose(conf_dir, config_name, [o.input_line for o in groups])
    cfg = _apply(baseline, values) if baseline is not None else None
    if cfg is None:
        return overrides  # an unknown option or key: Hydra's message names it and the available choices
    check_value_types(baseline, cfg, values)
    paths = cfg.get("paths") or {}
    if paths.get("log_dir"):
        check_folder(Path(str(paths.log_dir)), float(paths.get("min_free_mb") or 0), key="paths.log_dir")
    if config_name == "train":
        return resume_overrides(cfg, parsed, overrides)
    return overrides


# ---- value types ---------------------------------------------------------------------------------------------------
def check_value_types(baseline: DictConfig, cfg: DictConfig, values: list[Any]) -> None:
    """`key=value` must keep a numeric key numeric: compare with the default the chosen group options give it."""
    for override in values:
        if override.is_delete() or override.is_add():
            continue
        key = override.key_or_group
        default = _select(baseline, key)
        value = _select(cfg, key)
        if isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(value, str) \
                and not _looks_numeric(value):
            kind = "an integer" if isinstance(default, int) else "a number"
            raise ConfigError(f"{key}={value!r}: expected {kind} (the default is {default}); "
                              f"pass e.g. {key}={default}, or {key}=null where the key allows none")


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return text.startswith("${")  # an interpolation, resolved later


def _select(cfg: DictConfig, key: str) -> Any:
    try:
        node = OmegaConf.select(cfg, key, throw_on_missing=False, throw_on_resolution_failure=False)
    except Exception:
        return None
    return node if not OmegaConf.is_config(node) else None


# ---- resume --------------------------------------------------------------------------------------------------------
def resume_overrides(cfg: DictConfig, parsed: list[Any], overrides: list[str]) -> list[str]:
    """Rewrite `resume=...` (or `ckpt_path=last`) into the resumed run's own overrides + `hydra.run.dir=<run>`."""
    from litforge import resume

    value = cfg.get("resume")
    if cfg.get("ckpt_path") == "last":  # Lightning's word for it; here it means the same as resume=auto
        if value:
            raise ConfigError("pass either resume=... or ckpt_path=last, not both")
        value = "auto"
    if not value:
        return overrides
    if cfg.get("ckpt_path") not in (None, "last"):
        raise ConfigError(f"pass either resume={value} (continue a run in its folder) or ckpt_path=<file> (start a "
                          "new run folder from a checkpoint), not both")
    log_dir, task_name = str(cfg.paths.log_dir), str(cfg.task_name)
    found = resume.resolve(str(value), log_dir, task_name)
    mine = [o for o in parsed if o.key_or_group not in ("resume", "ckpt_path")]
    if found is None:
        print(f"litforge: resume={value}: no interrupted run under {log_dir}/{task_name}/runs, starting a new run",
              file=sys.stderr)
        return [o.input_line for o in mine]
    run_dir, ckpt = found
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


def _apply(baseline: DictConfig, values: list[Any]) -> DictConfig | None:
    """`baseline` with the key=value overrides applied as Hydra applies them (None if one does not fit).

    The same rules as Hydra's own (private) `ConfigLoaderImpl._apply_overrides_to_config`, written with OmegaConf's
    public API: `key=v` must name an existing key, `+key=v` a new one, `++key=v` either, `~key` an existing one.
    Composing the config a second time with every override would do the same through Hydra's public `compose`,
    at twice the start-up cost.
    """
    cfg = baseline.copy()
    try:
        for override in values:
            if override.package is not None:
                return None
            key, value = override.key_or_group, override.value()
            exists = OmegaConf.select(cfg, key, throw_on_missing=False) is not None
            if override.is_delete():
                if not exists:
                    return None
                parent, _, leaf = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
            elif override.is_add() or override.is_force_add():
                if override.is_add() and exists and not isinstance(value, (dict, list)):
                    return None
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                OmegaConf.update(cfg, key, value, merge=True)
    except Exception:
        return None
    return cfg


def _is_hydra(override: Any) -> bool:
    return override.key_or_group.split(".")[0].split("/")[0] == "hydra"


def _is_group(conf_dir: Path, override: Any) -> bool:
    key = override.key_or_group
    return "." not in key and (conf_dir / key).is_dir()
