"""Bounds of an argument, written where the argument is declared, in the field's standard (pydantic / annotated-types):
`dropout: Annotated[float, Field(ge=0, lt=1)]`, `Literal[...]`, unions, or one of the aliases below.

Why in core: every layer annotates its constructors with these (models import nothing of config); the config check
(litforge.config.check) has pydantic judge a composed config against them before a run starts. `Field(examples=[...])`
gives the example a refusal shows; `Field(description=...)` the words for a condition no type says (an AfterValidator).
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
