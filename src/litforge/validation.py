"""Config checks that apply to the composed config as a whole, before any group is built.

Torch-free: the CLI runs them before Hydra starts a job (litforge.preflight), and the training job runs them again
for configs composed in code (notebooks, tests).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from litforge.errors import ConfigError

# keys that moved to another group: the old spelling is refused with the new one, never silently ignored
MOVED_KEYS = {
    "model.init_from": "task.init_from",  # which weights a task starts from is the task's business, not the net's
    "optimizer.lr_scaling": "task.lr_scaling",  # scaling by the data-parallel replicas is decided by the task
}


def moved_key_message(old: str, value: Any = "<value>") -> str:
    new = MOVED_KEYS[old]
    return f"{old} has moved to {new}: pass {new}={value} instead"


def check_moved_keys(cfg: Any) -> None:
    """Refuse a composed config (e.g. from a user's own YAML) that still sets a key under its old name."""
    for old in MOVED_KEYS:
        value = OmegaConf.select(cfg, old, throw_on_missing=False) if OmegaConf.is_config(cfg) else None
        if value is not None:
            raise ConfigError(moved_key_message(old, value))
