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
