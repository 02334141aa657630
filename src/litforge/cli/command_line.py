"""The command line as Hydra will read it, before Hydra runs: its config flags, its overrides parsed, the config it
composes (Hydra's Compose API: torch-free), the jobs of a sweep. The plumbing litforge.cli.preflight checks with; it
judges nothing but the one thing Hydra's grid sweeper would fail on after Hydra started (an interval).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from omegaconf import DictConfig

from hydra_plugins.litforge_searchpath import USER_FIRST
from litforge.core.errors import ConfigError
from litforge.runtime.override_text import override_text
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
    """The composed config (with `hydra`: its `hydra` node too), or None when Hydra cannot compose it. With `top_dir`
    (`--config-dir`), the project's top config is found there and litforge's conf/ joins the search path, as Hydra's
    own `--config-dir` does."""
    register_resolvers()  # the ${uid:} resolver used by hydra.run.dir
    put_users_first([*(["--config-dir", str(top_dir)] if top_dir else []), *overrides])
    if top_dir is not None:
        given = [o for o in overrides if o.startswith("hydra.searchpath=")]
        folders = ",".join([f"file://{conf_dir.resolve()}", *(g.split("=", 1)[1].strip("[]") for g in given)])
        overrides = [f"hydra.searchpath=[{folders}]", *(o for o in overrides if o not in given)]
    try:
        with initialize_config_dir(config_dir=str((top_dir or conf_dir).resolve()), version_base="1.3"):
            return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()
        USER_FIRST.clear()  # this composition's: the next one (or the run) names its own


def put_users_first(args: list[str]) -> None:
    """Search the user's config folders that `args` name (`--config-dir`, then `hydra.searchpath`) before litforge's
    own (hydra_plugins.litforge_searchpath.USER_FIRST): their option named like one of litforge's is the one used."""
    _, config_dir, _, rest = split_config_flags(args)
    USER_FIRST[:] = [f"file://{Path(config_dir).resolve()}"] if config_dir else []
    for override in parse([a for a in rest if a.startswith("hydra.searchpath=")]) or []:
        value = override.value()
        USER_FIRST.extend(str(v) for v in (value if isinstance(value, list) else [value]))


def parse(overrides: list[str]) -> list[Override] | None:
    """Hydra's parsed overrides, or None for a syntax error (Hydra reports those itself)."""
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return None


def typed(overrides: Iterable[Override]) -> list[str]:
    """The overrides as the user typed them (Hydra sets `input_line` on each it parses from a command line)."""
    return [o.input_line or "" for o in overrides]


def values(override: Override) -> list[object]:
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


def is_hydra(override: Override) -> bool:
    return override.key_or_group.split(".")[0].split("/")[0] == "hydra"


def is_group(conf_dir: Path, override: Override) -> bool:
    key = override.key_or_group
    return "." not in key and (conf_dir / key).is_dir()


def sweep_jobs(parsed: list[Override], grid: bool = False, limit: int = 16) -> list[list[str]]:
    """The jobs (override lines) a sweep's check composes: every combination of :func:`sweep_values` while there are
    at most `limit` (each value meets every other, so the relations between swept keys are judged too); past that,
    each value once with the other keys at their first value: as many jobs as values, bounded by what was typed and
    not by the product of a grid (composing and checking one job takes tens of ms). The first job: every key at its
    first value."""
    rows = list(sweep_values(parsed, grid).values())
    if math.prod(len(r) for r in rows) <= limit:
        return [list(job) for job in itertools.product(*rows)]
    first = [r[0] for r in rows]
    return [first, *([*first[:i], v, *first[i + 1 :]] for i, row in enumerate(rows) for v in row[1:])]


def sweep_values(parsed: list[Override], grid: bool) -> dict[str, list[str]]:
    """Per key (as typed: `+key`, `~key`), the override lines whose values the sweep's jobs can get, as far as a check
    of them needs: every value of a choice; the smallest and largest of a range, and the two ends of a search's
    interval (`tag(int, ...)`: as integers). A key's check is a type and a range of numbers, which the two ends decide,
    however many values lie between: the cost follows what was typed, not a range's length. A later override of a
    key replaces an earlier one, as both sweepers read them (`hydra.sweeper.params`, then the command line).
    `grid`: Hydra's basic sweeper, which cannot take an interval (only a sampling sweeper, Optuna's, can)."""
    lines: dict[str, list[str]] = {}
    for o in parsed:
        key, sweep = o.get_key_element(), o.value()
        lines.pop(key, None)
        if isinstance(sweep, ChoiceSweep):
            texts = list(o.sweep_string_iterator())
        elif isinstance(sweep, RangeSweep):
            numbers = [v for v in o.sweep_iterator() if isinstance(v, int | float)]  # a range's: all numbers
            texts = [override_text(v) for v in (min(numbers), max(numbers))] if numbers else []
        elif isinstance(sweep, IntervalSweep) and grid:
            raise ConfigError(
                f"{o.input_line}: an interval is sampled by a search, and a grid sweep has none; list values "
                f"({key}=choice(a,b) or range(a,b,step)) or search with hparams_search=<name> "
                "(or hydra/sweeper=litforge_optuna)"
            )
        elif isinstance(sweep, IntervalSweep):
            cast = int if "int" in sweep.tags else float
            texts = [override_text(cast(sweep.start or 0)), override_text(cast(sweep.end or 0))]
        elif o.is_sweep_override():  # glob(): Hydra expands it from the config folders; its options are checked
            continue
        else:
            texts = []
            lines[key] = typed([o])
        if texts:
            lines[key] = [f"{key}={t}" for t in dict.fromkeys(texts)]
    return lines
