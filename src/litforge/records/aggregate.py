"""Mean ± std of the final metrics per configuration, over seeds: `python -m litforge.records.aggregate <folders...>`.

Give it a sweep folder (`python train.py -m seed=1,2,3 optimizer.lr=0.01,0.001`), several run folders, or a
folder above them: every run below that has a `metrics.json` counts. Runs whose command-line overrides differ only
by `seed` or by the cross-validation fold `data.fold` (and by where they write: `paths.*`, `hydra.*`) form one
configuration: `python train.py -m data.num_folds=5 data.fold='range(5)'` gives one row, mean ± std over the folds. The
table is printed and saved as `aggregate.csv` and `aggregate.md` (in the one folder given, or in `--out`).

Reads only JSON/YAML files: no torch import, so it answers in well under a second.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from litforge.records.sweeps import atomic_write, csv_text, markdown

#: overrides that do not change what is trained: runs that differ only in these are repeats of one configuration
IGNORED_PREFIXES = ("seed=", "data.fold=", "paths.", "hydra.", "print_config=", "hydra/")
#: the overrides that make one run a repeat of its configuration, and how its label in the `seeds` column starts
REPEAT_KEYS = (("seed=", ""), ("data.fold=", "fold="))


@dataclass
class Group:
    config: str
    seeds: list[str] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: int = 0
    objective: dict[str, Any] | None = None

    def stats(self, name: str) -> tuple[float, float] | None:
        values = self.metrics.get(name) or []
        if not values:
            return None
        return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders at or below the given paths: every folder Hydra wrote a job into (`.hydra/overrides.yaml`) or
    that has results; one without `metrics.json` counts as failed (or still running)."""
    runs: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise SystemExit(f"litforge.records.aggregate: error: {path} does not exist")
        for marker in ("metrics.json", "result.json"):
            runs.update(p.parent for p in path.rglob(marker))
        runs.update(p.parent.parent for p in path.rglob(".hydra/overrides.yaml"))
    return sorted(runs)


def run_overrides(run: Path) -> list[str]:
    result = run / "result.json"
    if result.exists():
        return list(json.loads(result.read_text()).get("overrides") or [])
    overrides = run / ".hydra" / "overrides.yaml"
    return list(yaml.safe_load(overrides.read_text()) or []) if overrides.exists() else []


def config_key(overrides: list[str]) -> tuple[str, str | None]:
    """(the configuration as the overrides that matter, this run's repeat label: its seed and/or its fold)."""
    labels = [label + o.split("=", 1)[1] for key, label in REPEAT_KEYS for o in overrides if o.startswith(key)]
    seed = "/".join(labels) or None
    kept = [o for o in overrides if not o.lstrip("+~").startswith(IGNORED_PREFIXES)]
    return " ".join(kept) or "(defaults)", seed


def aggregate(runs: list[Path]) -> tuple[list[Group], list[str]]:
    """Groups of runs by configuration, best first, and the overrides every configuration shares."""
    groups: dict[str, Group] = {}
    for run in runs:
        config, seed = config_key(run_overrides(run))
        group = groups.setdefault(config, Group(config))
        metrics_file = run / "metrics.json"
        if not metrics_file.exists():
            group.failed += 1
            continue
        record = json.loads(metrics_file.read_text())
        group.seeds.append(seed or "default")
        group.objective = group.objective or record.get("objective")
        for name, value in record.get("metrics", {}).items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                group.metrics[name].append(float(value))
    shown, common = drop_common(list(groups.values()))
    return rank(shown), common


def drop_common(groups: list[Group]) -> tuple[list[Group], list[str]]:
    """Keep only what tells configurations apart; the overrides all of them share are returned to be said once."""
    if len(groups) < 2:
        return groups, []
    first = groups[0].config.split(" ")
    common = [o for o in first if all(o in g.config.split(" ") for g in groups[1:])]
    for g in groups:
        g.config = " ".join(o for o in g.config.split(" ") if o not in common) or "(defaults)"
    return groups, common


def rank(groups: list[Group]) -> list[Group]:
    """Best mean objective first (groups without one last)."""
    objective = next((g.objective for g in groups if g.objective), None)
    if not objective:
        return groups
    sign = -1.0 if objective.get("mode", "max") == "max" else 1.0

    def key(group: Group) -> tuple[int, float]:
        stats = group.stats(objective["metric"])
        return (1, 0.0) if stats is None else (0, sign * stats[0])

    return sorted(groups, key=key)


def table(groups: list[Group], split: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows: `mean ± std` cells (to read), or with `split` separate mean and std columns (for pandas)."""
    names = sorted({name for g in groups for name in g.metrics})
    head = [f"{n}_{s}" for n in names for s in ("mean", "std")] if split else names
    rows = []
    for g in groups:
        cells: list[str] = []
        for x in (g.stats(n) for n in names):
            cells += (
                ([f"{x[0]:.6g}", f"{x[1]:.6g}"] if x else ["", ""])
                if split
                else [f"{x[0]:.4f} ± {x[1]:.4f}" if x else ""]
            )
        rows.append([g.config, str(len(g.seeds)), str(g.failed), " ".join(g.seeds), *cells])
    return ["configuration", "runs", "failed", "seeds", *head], rows


def column_groups(header: list[str], rows: list[list[str]], width: int) -> list[list[int]]:
    """The table's columns in groups that each fit `width` characters, every group led by the configuration column:
    a wide table (many metrics) is printed as several, one under the other, instead of squeezed into the terminal."""
    sizes = [max(map(len, column)) + 3 for column in zip(header, *rows, strict=True)]  # a cell's padding and border
    first = min(sizes[0], width // 3)  # a long configuration folds onto more lines
    groups, used = [[0]], first + 1
    for i in range(1, len(header)):
        if used + sizes[i] > width and len(groups[-1]) > 1:
            groups, used = [*groups, [0]], first + 1
        groups[-1].append(i)
        used += sizes[i]
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m litforge.records.aggregate", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a sweep folder, run folders, or folders above them")
    parser.add_argument("--out", type=Path, help="folder for aggregate.csv/.md (default: the one folder given, or .)")
    parser.add_argument("--metrics", nargs="*", default=None, help="only these metrics (default: all)")
    args = parser.parse_args(argv)

    runs = find_runs(args.paths)
    if not runs:
        paths = " ".join(map(str, args.paths))
        print(f"litforge.records.aggregate: error: no run folders (with metrics.json) under {paths}", file=sys.stderr)
        return 1
    groups, common = aggregate(runs)
    if args.metrics:
        for g in groups:
            g.metrics = defaultdict(list, {k: v for k, v in g.metrics.items() if k in args.metrics})
    out_dir = args.out or (args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else Path.cwd())
    header, rows = table(groups)  # aggregate.csv: mean and std columns (for pandas); .md, `mean ± std` (to read)
    atomic_write(csv_path := out_dir / "aggregate.csv", csv_text(*table(groups, split=True)))
    said = f"All runs share: `{' '.join(common)}`" if common else ""
    atomic_write(
        md_path := out_dir / "aggregate.md", markdown("Mean ± std over seeds and folds, best first", said, header, rows)
    )
    console = Console()
    if common:
        console.print(f"all runs share: {' '.join(common)}")
    title = f"{len(runs)} runs, {len(groups)} configurations (mean ± std over seeds and folds)"
    for part, columns in enumerate(column_groups(header, rows, console.width)):
        view = Table(title=None if part else title, header_style="bold")
        for i in columns:
            view.add_column(header[i], justify="left" if i in (0, 3) else "right", overflow="fold")
        for row in rows:
            view.add_row(*(row[i] for i in columns))
        console.print(view)
    print(f"written:\n{csv_path}\n{md_path}")  # whole paths, each on its own line (rich would fold them)
    return 0


if __name__ == "__main__":
    sys.exit(main())
