"""The command line as Hydra will read it, before Hydra runs: its config flags, its overrides parsed, the config it
composes (Hydra's Compose API: torch-free). The plumbing litforge.cli.preflight checks with; it judges nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.runtime.ranks import register_resolvers


def split_config_flags(args: list[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    """(the `--config-dir`/`--config-name` flags as typed, the folder, the name, every other argument)."""
    kept: list[str] = []
    rest: list[str] = []
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        key, eq, value = args[i].partition("=")
        if key in ("--config-dir", "-cd", "--config-name", "-cn") and (eq or i + 1 < len(args)):
            value = value if eq else args[i + 1]
            kept += args[i : i + (1 if eq else 2)]
            found["dir" if key in ("--config-dir", "-cd") else "name"] = value
            i += 1 if eq else 2
            continue
        rest.append(args[i])
        i += 1
    return kept, found.get("dir"), found.get("name"), rest


def compose(
    conf_dir: Path, config_name: str, overrides: list[str], top_dir: Path | None = None, hydra: bool = False
) -> DictConfig | None:
    """The composed config (with its `hydra` node where `hydra`), or None when Hydra cannot compose it. With `top_dir`
    (`--config-dir`), the project's top config is found there and litforge's conf/ joins the search path, as Hydra's
    own `--config-dir` does."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()  # the ${uid:} resolver used by hydra.run.dir
    if top_dir is not None:
        given = [o for o in overrides if o.startswith("hydra.searchpath=")]
        folders = ",".join([f"file://{conf_dir.resolve()}", *(g.split("=", 1)[1].strip("[]") for g in given)])
        overrides = [f"hydra.searchpath=[{folders}]", *(o for o in overrides if o not in given)]
    try:
        with initialize_config_dir(config_dir=str((top_dir or conf_dir).resolve()), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()


def parse(overrides: list[str]) -> list[Any] | None:
    """Hydra's parsed overrides, or None for a syntax error (Hydra reports those itself)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return None


def values(override: Any) -> list[Any]:
    """The values an override hands to its jobs: one, or each of a choice/range sweep (an interval: none here)."""
    if not override.is_sweep_override():
        return [override.value()]
    try:
        return list(override.sweep_iterator())
    except Exception:
        return []


def null_groups_removed(conf_dir: Path, args: list[str]) -> list[str]:
    """`logger=null` (no logger) as Hydra spells it, `~logger`: Hydra refuses a null group override in a traceback."""
    group = [a.split("=")[0] for a in args]
    return [
        f"~{g}" if a == f"{g}=null" and g != "hydra" and (conf_dir / g).is_dir() else a
        for g, a in zip(group, args, strict=True)
    ]


def is_hydra(override: Any) -> bool:
    return override.key_or_group.split(".")[0].split("/")[0] == "hydra"


def is_group(conf_dir: Path, override: Any) -> bool:
    key = override.key_or_group
    return "." not in key and (conf_dir / key).is_dir()
