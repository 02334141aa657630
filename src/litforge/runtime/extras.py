"""Integrations a run does not always need are extras of the package (pyproject.toml): trackers, streaming, rl,
sweeps, cluster, deploy, tabular; `pip install -e ".[all]"` (or `.[dev]`) installs every one.

Each is imported only where it is used, so a run without them never pays for them; a run that needs a missing one
is refused before anything is built, in one line naming the extra, instead of failing with a ModuleNotFoundError
after the data and the net were built. Torch-free: the CLI asks before a job starts.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from litforge.core.errors import ConfigError

EXTRA_OF = {  # optional module -> the extra that installs it
    "mlflow": "trackers",
    "wandb": "trackers",
    "litdata": "streaming",
    "gymnasium": "rl",
    "optuna": "sweeps",
    "hydra_plugins.hydra_joblib_launcher": "sweeps",
    "hydra_plugins.hydra_submitit_launcher": "cluster",
    "torchao": "deploy",
    "onnx": "deploy",
    "onnxruntime": "deploy",
    "pyarrow": "tabular",
}
NEEDED_BY = {  # a config's `_target_` (or a choice) -> the optional module it needs
    "litforge.records.tracking.MLflowLogger": "mlflow",
    "litforge.records.tracking.WandbLogger": "wandb",
    "pytorch_lightning.loggers.WandbLogger": "wandb",
    "litforge.data.streaming.StreamingImageDataModule": "litdata",
    "litforge.data.gym.GymDataModule": "gymnasium",
    "litforge.callbacks.qat.QuantizationAwareTraining": "torchao",
    "litforge.callbacks.optuna_pruning.OptunaPruning": "optuna",
    "hydra/launcher=slurm": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=local": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hparams_search": "optuna",
    "export.py": "onnxruntime",
    "prepare.py": "litdata",
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None (as if uninstalled)
        return False


def require(what: str, used_as: str | None = None) -> None:
    """Refuse `used_as` (default: `what`) when the optional module `what` needs (NEEDED_BY) is not installed."""
    module = NEEDED_BY.get(what)
    if module is not None and not installed(module):
        extra = EXTRA_OF[module]
        raise ConfigError(
            f"{used_as or what} needs {module.split('.')[-1]}, which is not installed: it comes with litforge's "
            f"`{extra}` extra: pip install -e '.[{extra}]' (or '.[all]' for every integration)"
        )


def check_extras(parsed: list[Any], job: str) -> None:
    """The command line's job, launcher and search (Hydra's parsed overrides): each one's extra is installed."""
    require(f"{job}.py")
    for o in parsed:
        if o.key_or_group in ("hydra/launcher", "hparams_search") and not o.is_delete():
            choice = o.key_or_group if o.key_or_group == "hparams_search" else f"hydra/launcher={o.value()}"
            require(choice, o.input_line)
