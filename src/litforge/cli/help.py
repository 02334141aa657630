"""`python train.py --help` answered from the files in conf/, before Hydra starts.

Hydra's own `--help` composes the config and rebuilds its config repository several times per group it lists
(conf/'s 14 groups and 64 options, and Hydra's own): ~2.2 s of CPU here, against ~0.4 s for reading the folder
listing and one YAML file, which gives the same groups and options without importing torch. With overrides on the
command line (`python train.py model=cnn --help`) Hydra's help is used, because only it can show their effect on the
composed config.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

if TYPE_CHECKING:
    from litforge.cli.project import Project

HELP_FLAGS = ("--help", "-h")


def answer_help(
    config_name: str,
    conf_dir: Path,
    argv: list[str] | None = None,
    command: str | None = None,
    project: Project | None = None,
) -> None:
    """Print the fast help and exit when the command line is just `--help`; otherwise return and let Hydra run.

    `command`: how the user started the job (`litforge train`; default `python train.py`); `project`: a project of
    the user's own (litforge.cli.project), whose options are listed beside litforge's and whose top config's
    choices are the defaults shown.
    """
    args = sys.argv[1:] if argv is None else argv
    rest = [a for a in args if not a.startswith("hydra.searchpath=")]  # a user's own conf folders: listed too
    if len(rest) == 1 and rest[0] in HELP_FLAGS:
        extra = user_conf_folders(args, project.conf_dir if project is not None else None)
        top = None
        if project is not None:
            if project.top_config(config_name) != config_name:
                top = project.conf_dir / f"{project.top_config(config_name)}.yaml"
        try:
            text = help_text(config_name, conf_dir, script=f"{config_name}.py", extra=extra, command=command, top=top)
            print(text, flush=True)
        except BrokenPipeError:  # `python train.py --help | head`: the reader left, which is not an error
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (Python flushes stdout again at exit)
        sys.exit(0)


def searchpath_folders(args: list[str]) -> list[Path]:
    """The local folders a `hydra.searchpath=[file://...]` argument adds (docs/extending.md: a user's own conf/)."""
    folders = []
    for arg in args:
        if arg.startswith("hydra.searchpath="):
            try:
                value = OverridesParser.create().parse_override(arg).value()
            except Exception:  # Hydra reports its own syntax errors
                continue
            entries = value if isinstance(value, list) else [value]
            folders += [Path(str(e).removeprefix("file://")) for e in entries if not str(e).startswith("pkg://")]
    return folders


def user_conf_folders(args: list[str], project_conf: Path | None = None) -> list[Path]:
    """The user's own config folders, searched beside litforge's conf/: a project's (`--config-dir`, what `litforge
    new` sets up), then those `hydra.searchpath=` adds."""
    return [*filter(None, [project_conf]), *searchpath_folders(args)]


def group_options(group: str, conf_dir: Path, extra: Sequence[Path] = ()) -> list[str]:
    """The options of a config group: its YAML files in conf/ and in the user's searchpath folders."""
    return sorted({p.stem for folder in (conf_dir, *extra) for p in (folder / group).glob("*.yaml")})


def help_text(
    config_name: str,
    conf_dir: Path,
    script: str,
    extra: Sequence[Path] = (),
    command: str | None = None,
    top: Path | None = None,
) -> str:
    """The help of job `config_name`; `top`: a project's top config that starts from it (its choices are the
    defaults shown, its own keys are listed after litforge's)."""
    source = (conf_dir / f"{config_name}.yaml").read_text()
    defaults: dict[str, object] = {}
    texts = [source] + ([top.read_text()] if top is not None else [])
    follow_recipe = top is not None
    while texts:
        for entry in (yaml.safe_load(texts.pop(0)) or {}).get("defaults", []):
            if isinstance(entry, dict):
                for group, option in entry.items():
                    defaults[str(group).removeprefix("override ").lstrip("/")] = option
        # a project's default recipe (experiment=<its own>) chooses the groups' defaults in turn
        recipe = defaults.pop("experiment", None) if follow_recipe else None
        if isinstance(recipe, str):
            defaults["experiment"] = recipe
            found = [f for f in (*extra, conf_dir) if (f / "experiment" / f"{recipe}.yaml").is_file()]
            texts += [(found[0] / "experiment" / f"{recipe}.yaml").read_text()] if found else []
            follow_recipe = False  # only the top config's own recipe
    script = command or f"python {script}"

    lines = [
        f"{script} [group=option ...] [key=value ...]      (-m: one job per combination, a sweep)",
        "",
        "Config groups (* = default; a group with no default is off until chosen):",
    ]
    for group, default in defaults.items():
        options = group_options(group, conf_dir, extra)
        if group == "hydra" or not options:
            continue
        shown = ", ".join(f"{o}*" if o == default else o for o in options)
        lines.append(f"  {group:<15} {shown}")
    lines += ["", "Top-level keys (key=value):"]
    lines += ["  " + line for line in _top_level_lines(source)]
    if top is not None and _top_level_lines(top.read_text()):
        lines += ["", f"Set by this project ({top}):"]
        lines += ["  " + line for line in _top_level_lines(top.read_text())]
    lines += [
        "",
        "Any key of a group: group.key=value (e.g. optimizer.lr=3e-4). More:",
        f"  {script} --cfg job                 print the composed config (add overrides to see them)",
        f"  {script} --cfg job --package data  ... one group only",
        f"  {script} <overrides> --help        Hydra's help with the composed config",
        f"  {script} --hydra-help              Hydra's own flags and groups (hydra/launcher=joblib, ...)",
        f'  eval "$({script} -sc install=bash)" tab completion of groups, options and keys',
    ]
    return "\n".join(lines)


def _top_level_lines(source: str) -> list[str]:
    """The config's own top-level keys with their comments, as written (the defaults list left out)."""
    kept, in_defaults = [], False
    for line in source.splitlines():
        if line.startswith("defaults:"):
            in_defaults = True
            continue
        if in_defaults and (line.startswith((" ", "-")) or not line.strip()):
            continue
        in_defaults = False
        if line.strip() and not line.startswith("#"):
            kept.append(line)
    return kept
