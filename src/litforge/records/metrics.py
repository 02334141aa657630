"""Lightning's `callback_metrics` as plain floats: what metrics.json, sweep summaries and the HParams tab store."""

from __future__ import annotations

import math
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
