"""What a refusal suggests must work: the key that exists closest to a mistyped one, and `+key` only where something
reads that key.

A top-level key is read only if its job's config has it (each job's conf/<job>.yaml lists every key the job reads;
tests/test_validation.py keeps them and litforge.config.settings equal) or an interpolation of the config names it, so
`+test=false` is refused (train's key is `test_after_training`) rather than run and ignored. A key under a group is
offered as `+group.key` only when what the group builds takes that argument (its source's signature, or its row in
litforge.config.library), judged without importing torch. Called from litforge.cli.preflight.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from litforge.cli.command_line import compose, typed
from litforge.config.check import GROUP_TARGETS
from litforge.config.library import STAND_INS
from litforge.config.settings import JobSettings
from litforge.config.source import read_signature
from litforge.core.errors import ConfigError


def closest(name: str, names: list[str]) -> str | None:
    """The name in `names` nearest to `name`: by spelling, else one with `name` as a word (`test`:
    `test_after_training`). A name that differs in a whole word is no misspelling: `num_workers` is not offered
    `num_folds` (which would turn a run into a k-fold split)."""
    match = [m for m in difflib.get_close_matches(name, names, n=3) if _misspelt(name, m)][:1]
    worded = sorted((n for n in names if name.lower() in n.lower().split("_")), key=len)
    return next(iter(match or worded), None)


def _misspelt(typed: str, name: str) -> bool:
    """Whether `typed` reads as `name` misspelt: word for word alike (`max_epoch`: `max_epochs`), when both have the
    same number of `_` words."""
    words, other = typed.lower().split("_"), name.lower().split("_")
    alike = lambda a, b: difflib.SequenceMatcher(None, a, b).ratio() >= 0.6  # noqa: E731
    return len(words) != len(other) or all(alike(a, b) for a, b in zip(words, other, strict=True))


def options_with_key(conf_dir: Path, group: str, key: str, extra: Sequence[Path] = ()) -> list[str]:
    """The options of `group` that set `key` (`data.num_workers`: image_folder, streaming), in conf/ and in the user's
    own config folders `extra` (litforge.cli.help.user_conf_folders)."""
    found: list[str] = []
    for path in sorted(p for folder in (conf_dir, *extra) for p in (Path(folder) / group).glob("*.yaml")):
        try:
            body = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(body, dict) and key in body and path.stem not in found:
            found.append(path.stem)
    return found


def unknown_key_message(
    cfg: DictConfig, override: Override, job: str = "train", conf_dir: Path | None = None, extra: Sequence[Path] = ()
) -> str | None:
    """`trainer.max_epoch=3`: which part of the key does not exist, the closest key that does and, where what the
    group builds takes that argument, that `+` adds it; else the group's other options that have the key."""
    node: object = cfg
    path: list[str] = []
    line = override.input_line or ""
    value = line.partition("=")[2]
    parts = override.key_or_group.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None  # e.g. a group switched off (null): Hydra's message applies
        if part not in node.keys():  # `in node` is False for a key whose value is ??? (to be given)
            if override.is_add() or override.is_force_add():
                return None  # a new key: what reads it judges it
            names = [str(k) for k in node.keys() if not str(k).startswith("_")]
            nested = nested_key(cfg, part) if len(parts) == 1 else None  # lr=0.1: optimizer.lr, epochs=3: max_epochs
            match = None if nested else closest(part, names)
            where = ".".join(path) or f"{job}'s config"
            if match or nested:
                fix = f"did you mean {nested or '.'.join([*path, str(match), *parts[i + 1 :]])}={value}?"
            elif path and takes(node, ".".join(path), part):
                fix = f"+{line} adds it (what {where} builds takes `{part}`)"
            elif len(path) == 1 and conf_dir and (options := options_with_key(conf_dir, path[0], part, extra)):
                chosen = ", ".join(f"{path[0]}={o}" for o in options)
                fix = f"it is a key of {chosen}: choose one of them, or remove {line}"
            else:
                fix = f"remove it, or fix its spelling ({where} has: {', '.join(names)})"
            return f"{line}: {where} has no key `{part}`; {fix}"
        try:
            node = node[part]
        except Exception:
            return None
        path.append(part)
    if override.is_add():  # Hydra: "Could not append to config. An item is already at ..." with a traceback
        return f"{line}: {override.key_or_group} is already a key of {job}'s config: set it without +, as {line[1:]}"
    return None


def nested_key(cfg: DictConfig, name: str) -> str | None:
    """The key whose own name is `name`, or nearest it, at the top or under a group (`seeed`: seed, `lr`:
    optimizer.lr, `epochs`: trainer.max_epochs): a top-level key typed for one a group holds, or misspelt."""
    leaves: dict[str, str] = {}  # own name -> the first dotted key with it: the top level's, then the groups' in order

    def walk(node: Mapping[str, object], prefix: str) -> None:
        for key, child in node.items():
            if isinstance(child, dict):
                walk(child, f"{prefix}{key}.")
            elif not str(key).startswith("_"):
                leaves.setdefault(str(key), f"{prefix}{key}")

    plain = OmegaConf.to_container(cfg, resolve=False)  # interpolations unresolved: some resolve only in a job
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    walk({str(k): v for k, v in plain.items() if not isinstance(v, dict)}, "")
    walk({str(k): v for k, v in plain.items() if isinstance(v, dict)}, "")
    worded = [k for k in leaves if name.lower() in k.lower().split("_")]  # epochs: max_epochs (how many), min_epochs
    worded.sort(key=lambda k: (not k.startswith("max_"), len(k)))
    found = name if name in leaves else next(iter(worded), None) or closest(name, list(leaves))
    return leaves[found] if found else None


def takes(node: DictConfig, scope: str, argument: str) -> bool:
    """Whether what `node` (at `scope`) builds has an argument `argument`, as far as is known without torch."""
    name = str(node.get("_target_") or scope)
    name = GROUP_TARGETS.get(name, name)
    read = read_signature(name) if "." in name and not name.startswith(("torch.", "pytorch_lightning.")) else None
    return argument in {**(read or ({}, True))[0], **STAND_INS.get(name, {})}


#: the jobs that rebuild a trained task and may change its decisions (litforge.core.contracts.DecidingTask)
DECIDING_JOBS = ("eval", "predict", "export")


def decision_overrides(overrides: list[str], job: str) -> list[str]:
    """`task.threshold=0.3` at eval/predict/export: a decision of the checkpoint's task, which the job's config
    cannot list (its `task: {}` is filled from the command line; the task is known only from the checkpoint), so
    it is handed to Hydra as `++task.threshold=0.3`; the job sets it, or refuses a name the task does not declare."""
    if job not in DECIDING_JOBS:
        return overrides
    return [f"++{o}" if o.startswith("task.") else o for o in overrides]


def check_added_keys(cfg: DictConfig, parsed: list[Override], job: str) -> None:
    """Each `+key=value` (or `++`) at the top level that no part of `job` reads: refused, with the key meant."""
    text, plain = OmegaConf.to_yaml(cfg), OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    lines = []
    for o in parsed:
        key = o.key_or_group
        if not (o.is_add() or o.is_force_add()) or "." in key or "/" in key or key == "hydra":
            continue
        if re.search(r"\$\{[^{}]*\b" + re.escape(key) + r"\b", text) or (
            o.is_force_add() and key in JobSettings.model_fields
        ):
            continue  # an interpolation reads it, or `++` sets a key of the jobs' own
        others = [str(k) for k, v in plain.items() if str(k) != key and not isinstance(v, dict)]
        match = closest(key, others)
        value = str(o.input_line).split("=", 1)[1]
        lines.append(
            f"{o.input_line}: {job} reads no top-level key `{key}`, so it would change nothing; "
            + (f"did you mean {match}={value}?" if match else f"remove it (python {job}.py --help lists the keys)")
        )
    if lines:
        raise ConfigError(*lines)


def absent_group_message(
    conf_dir: Path, name: str, searchpath: list[Override], groups: list[Override], job: str
) -> str | None:
    """`predict.py logger=csv`: a group the job composes none of (Hydra suggests `+logger=csv`, which nothing reads)."""
    cfg = compose(conf_dir, name, typed(searchpath), hydra=True)
    choices = cfg.hydra.runtime.choices if cfg is not None else {}
    for o in [o for o in groups if cfg is not None and not o.is_add() and o.key_or_group not in choices]:
        group, value = o.key_or_group, "null" if o.is_delete() else o.value()
        return f"{group}={value}: {job} has no `{group}` group (nothing in {job} reads one); remove it"
    return None


def check_syntax(overrides: list[str]) -> None:
    """An override Hydra's grammar cannot read (`data.path=données.csv`, `data.delimiter=;`): Hydra prints a lexer
    error over four lines naming neither the fix nor that quoting is the fix. The one override that fails, and the
    quoted spelling when Hydra reads that (when no single override fails, Hydra's own message follows)."""
    parser = OverridesParser.create()

    def fails(line: str) -> str | None:
        try:
            parser.parse_overrides([line])
            return None
        except Exception as exc:
            return str(exc).splitlines()[0]

    for line in overrides:
        if (problem := fails(line)) is None:
            continue
        key, eq, value = line.partition("=")
        home = f"{key}={os.path.expanduser(value)}"  # `data.path=~/x.csv`: the shell expands `~` only at a word's start
        if value.startswith("~") and fails(home) is None:
            raise ConfigError(f"{line}: Hydra's override grammar does not take `~`; write the home folder out: {home}")
        quoted = f"{key}='{value}'"
        if problem.startswith("LexerNoViable") and eq and "'" not in value and fails(quoted) is None:
            raise ConfigError(
                f"{line}: Hydra's override grammar does not take {value!r} unquoted; quote the value "
                f'(in a shell: "{quoted}")'
            )
        raise ConfigError(
            f"{line}: Hydra's override grammar cannot read it ({problem}); see "
            "https://hydra.cc/docs/advanced/override_grammar/basic/ (close brackets; quote values with spaces or signs)"
        )
