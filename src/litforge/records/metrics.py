"""Lightning's `callback_metrics` as plain floats: what metrics.json, sweep summaries and the HParams tab store;
a training run's metrics.json."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Finite scalars only, sorted by name: NaN/inf would make metrics.json invalid JSON and rank sweeps wrongly."""
    out = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[name] = number
    return dict(sorted(out.items()))


def write_metrics(run_dir: Path, tested: Mapping[str, Any], metric: str, mode: str, *, write: bool) -> dict[str, Any]:
    """A training run's result (`tested`: its metrics and checkpoints) with the value of its objective `metric`
    (`mode`: min or max); `metrics.json`, a finished run's marker, written where `write` (global rank 0)."""
    objective = {"metric": metric, "mode": mode, "value": tested["metrics"].get(metric)}
    result = {"metrics": tested["metrics"], "objective": objective, **tested, "output_dir": str(run_dir)}
    if write:
        (run_dir / "metrics.json").write_text(
            json.dumps({k: v for k, v in result.items() if k != "interrupted"}, indent=2)
        )
    return result
