"""Habits of lightning-hydra-template's users (ashleve/lightning-hydra-template, where many of litforge's come from;
docs/migrating.md has the whole table): a spelling of theirs that litforge does not take is answered in one line
with litforge's (:func:`check_habits`, asked by litforge.cli.preflight before any other key check), and their `.env`
file of secrets is read (:func:`load_env_file`, by litforge.cli.main before the config is composed).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf

from litforge.core.errors import ConfigError

# their key (a prefix when it ends in ".") → litforge's spelling; {value}: the value typed, {rest}: the key after it
KEYS = {
    "extras.print_config": "print_config={value} (true prints the whole composed config at start)",
    "extras.enforce_tags": "remove it: litforge never asks for tags (tags=[a,b] labels a run when you want)",
    "extras.ignore_warnings": "remove it (to hide every warning: PYTHONWARNINGS=ignore python train.py)",
    "extras.": "remove it: litforge has no extras (print_config=true prints the config; tags=[a,b] labels a run)",
    "extras": "remove it: litforge has no extras (print_config=true prints the config; tags=[a,b] labels a run)",
    "model.optimizer.": "optimizer.{rest}={value} (the optimizer is its own group: optimizer=adam|adamw|sgd)",
    "model.scheduler.": "scheduler.scheduler.{rest}={value} (the scheduler is its own group: scheduler=plateau, ...)",
    "model.net.": "model.<argument>=...: the model group is the net itself (model=mlp: model.hidden_dims=[128,256])",
    "model.lr": "optimizer.lr={value}",
    "model.compile": "compile={value}",
    "train": "litforge always trains in train.py: to test a checkpoint, python eval.py ckpt_path=<file.ckpt>",
    "test": "test_after_training={value}",
    "optimized_metric": "objective.metric={value} (with objective.mode=max or min)",
    "paths.root_dir": "paths.log_dir=<folder> paths.data_dir=<folder> (relative to where you run; no root needed)",
    "trainer.tpu_cores": "strategy=tpu trainer.devices={value}",
    "trainer.gpus": "trainer.accelerator=gpu trainer.devices={value} (Lightning 2 split the old flag in two)",
    "trainer.strategy": "strategy={value} (strategies are their own group)",
}
# their group options → litforge's
OPTIONS = {
    ("experiment", "example"): "experiment=digits_cnn (an MNIST-like recipe that runs offline)",
    ("hparams_search", "mnist_optuna"): "hparams_search=digits_optuna",
    ("model", "mnist"): "model=mlp data=mnist",
    **{
        ("logger", name): "logger=tensorboard|csv|many|mlflow|wandb, or a YAML of your own in conf/logger/"
        for name in ("comet", "neptune", "aim")
    },
}


def habit_message(override: Override, trainer_keys: Collection[str]) -> str | None:
    """Litforge's spelling of one of their overrides (a Hydra override), in one line; None when it is not a habit.
    `trainer_keys`: the keys litforge's trainer config sets (not null)."""
    key, line = override.key_or_group, override.input_line or ""
    value = line.split("=", 1)[1] if "=" in line else ""
    for theirs, fix in KEYS.items():
        if key == theirs or (theirs.endswith(".") and key.startswith(theirs)):
            fix = fix.format(value=value, rest=key[len(theirs) :])
            return f"{line}: lightning-hydra-template's key, not litforge's; {fix} (docs/migrating.md)"
    option = OPTIONS.get((key, value))
    if option:
        return f"{line}: lightning-hydra-template's option, not litforge's; {option} (docs/migrating.md)"
    name = key.removeprefix("trainer.")
    if override.is_add() and key.startswith("trainer.") and name in trainer_keys:
        return f"{line}: trainer.{name} is already a key of litforge's trainer config; set it without +: {line[1:]}"
    return None


def check_habits(conf_dir: Path, parsed: list[Override]) -> None:
    """Refuse each of `parsed` (Hydra's parsed overrides) that is one of their spellings, naming litforge's."""
    trainer = conf_dir / "trainer" / "default.yaml"
    defaults = OmegaConf.to_container(OmegaConf.load(trainer)) if any(o.is_add() for o in parsed) else {}
    assert isinstance(defaults, dict)
    keys = {str(k) for k, v in defaults.items() if v is not None}
    if lines := [m for m in (habit_message(o, keys) for o in parsed) if m]:
        raise ConfigError(*lines)


def load_env_file(folder: Path | None = None) -> list[str]:
    """Their `.env`: `NAME=value` lines in `folder` (default: where you run) for secrets and machine facts
    (WANDB_API_KEY, MLFLOW_TRACKING_URI, a data path read by `${oc.env:NAME}`). A variable already set in the
    environment wins; returns the names this set. Read with python-dotenv where it is installed, else the same
    plain `NAME=value` / `export NAME="value"` / `# comment` lines by :func:`read_env_file`."""
    path = (folder or Path.cwd()) / ".env"
    if not path.is_file():
        return []
    try:
        from dotenv import dotenv_values  # optional: python-dotenv

        values = dotenv_values(path)
    except ImportError:
        values = read_env_file(path)
    added = [name for name, value in values.items() if value is not None and name not in os.environ]
    for name in added:
        os.environ[name] = str(values[name])
    return added


def read_env_file(path: Path) -> dict[str, str | None]:
    """`NAME=value` lines (`export ` before, quotes around the value and `# comments` allowed) as a mapping."""
    values: dict[str, str | None] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        name, eq, value = raw.strip().removeprefix("export ").partition("=")
        if not eq or name.lstrip().startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].strip()
        values[name.strip()] = value
    return values
