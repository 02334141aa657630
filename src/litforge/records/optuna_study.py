"""Optuna study access shared by the sweeper (hydra_plugins.litforge_optuna) and the pruning callback.

Kept apart from the callback so that the sweeper's process, which only asks and tells, imports neither torch nor
Lightning (a parallel launcher runs the trials elsewhere).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import optuna

PRUNERS = {"none": "NopPruner", "median": "MedianPruner", "hyperband": "HyperbandPruner"}
SQLITE_TIMEOUT_S = 60  # parallel trials (joblib) write to one SQLite file: wait for its lock instead of failing


def build_pruner(name: str, args: Mapping[str, Any] | None = None) -> Any:
    """The Optuna pruner `hydra.sweeper.pruner` names, with `hydra.sweeper.pruner_args` as its keyword arguments
    (ignored by `none`, so `pruner=none` alone turns off a search config's pruner)."""
    key = str(name).lower()
    if key not in PRUNERS:
        raise ValueError(
            f"hydra.sweeper.pruner={name!r}: use one of {', '.join(PRUNERS)} (e.g. hydra.sweeper.pruner=median)"
        )
    if key == "none":  # pruning off: pruner_args (e.g. a search config's median settings) do not apply
        return optuna.pruners.NopPruner()
    cls = getattr(optuna.pruners, PRUNERS[key])
    try:
        return cls(**dict(args or {}))
    except TypeError as exc:
        accepted = ", ".join(p for p in inspect.signature(cls).parameters if p != "self") or "none"
        raise ValueError(
            f"hydra.sweeper.pruner_args for pruner={key}: {exc}; {cls.__name__} takes: {accepted}"
        ) from None


def study_storage(url: str) -> Any:
    """The database storage for `url` (what Optuna builds from a URL string); SQLite files get a long lock timeout,
    as several processes write to them (parallel trials and the sweeper)."""
    engine = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite:") else None
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)
