"""Bounds of an argument, written where it is declared, in pydantic / annotated-types (docs/checks.md): the common
kinds by name. Core, so every layer may annotate with them; `Field(examples=[...])` gives a refusal's example.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# The bounded kinds most arguments are: the name says what the argument is, and its bound travels with it.
Count = Annotated[int, Field(ge=1)]  # batch sizes, steps, episodes, epochs between things
NonNegativeInt = Annotated[int, Field(ge=0)]  # worker processes, warmup steps, patience
Seed = Annotated[int, Field(ge=0, le=2**32 - 1, examples=[42])]  # numpy's range, which seed_everything enforces
HeldOut = Annotated[float, Field(ge=0, lt=1, examples=[0.1])]  # a share of a split held out, in [0, 1)
UnitInterval = Annotated[float, Field(ge=0, le=1)]  # a probability
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def fold_refusal(fold: object, num_folds: object) -> str | None:
    """`data.fold` against `data.num_folds` (K-fold cross-validation), or None when they fit: one text for the config
    check's relation and for a datamodule built in code (litforge.data.base)."""
    if num_folds is None and fold not in (0, None):  # it was ignored: `-m data.fold='range(5)'` ran 5 equal runs
        return (
            f"data.fold={fold} takes effect only with data.num_folds (K-fold cross-validation), which is null: "
            "pass data.num_folds=5 with it (all folds: -m data.fold='range(5)' data.num_folds=5), or drop data.fold"
        )
    if num_folds is None:
        return None
    if isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 2:
        return f"data.num_folds={num_folds} must be an integer >= 2 (e.g. 5), or null for the usual train/val split"
    if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < num_folds:
        return (
            f"data.fold={fold} is outside [0, {num_folds}) for data.num_folds={num_folds}: pass data.fold=0 (all "
            f"folds: -m data.fold='range({num_folds})')"
        )
    return None
