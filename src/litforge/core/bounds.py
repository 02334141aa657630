"""Bounds of an argument, written where the argument is declared: `dropout: Annotated[float, Range(ge=0, lt=1)]`.

Why in core: every layer may annotate its constructors with these markers (models import nothing of config);
litforge.config.signatures reads them and checks a config against them before a run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any


@dataclass(frozen=True, eq=False)  # hashed by identity: an example may be a list
class Range:
    """Bounds of a number (`gt`/`lt` exclusive, `ge`/`le` inclusive; `also`: values allowed outside them, e.g. -1 for
    "no limit") or, for a list, its least length `min_items`; `example` is a valid value, shown in the refusal."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    example: Any = None
    min_items: int = 0
    also: tuple[Any, ...] = ()

    def holds(self, v: Any) -> bool:
        if isinstance(v, (list, tuple)):
            return len(v) >= self.min_items
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v in self.also:
            return True
        return (
            (self.ge is None or v >= self.ge)
            and (self.gt is None or v > self.gt)
            and (self.le is None or v <= self.le)
            and (self.lt is None or v < self.lt)
        )

    def words(self) -> str:
        lo, hi = (self.gt if self.gt is not None else self.ge), (self.lt if self.lt is not None else self.le)
        if lo is not None and hi is not None:
            text = f"in {'(' if self.gt is not None else '['}{lo}, {hi}{')' if self.lt is not None else ']'}"
        elif lo is not None:
            text = f"{'>' if self.gt is not None else '>='} {lo}"
        else:
            text = f"{'<' if self.lt is not None else '<='} {hi}" if hi is not None else ""
        return text + "".join(f" or {a}" for a in self.also)


@dataclass(frozen=True, eq=False)  # hashed by identity: an example may be a list
class Check:
    """A condition no type or range can say, e.g. `Annotated[str, Check(is_duration, "a duration like 30min")]`:
    `words` replaces the type's own description in the refusal."""

    holds: Callable[[Any], bool]
    words: str
    example: Any = None


# The bounded kinds most arguments are: the name says what the argument is, and its bound travels with it.
Count = Annotated[int, Range(ge=1)]  # batch sizes, steps, episodes, epochs between things
NonNegativeInt = Annotated[int, Range(ge=0)]  # worker processes, warmup steps, patience
Seed = Annotated[
    int, Range(ge=0, le=2**32 - 1, example=42)
]  # numpy's range, which Lightning's seed_everything enforces
HeldOut = Annotated[float, Range(ge=0, lt=1, example=0.1)]  # a share of a split held out, in [0, 1)
UnitInterval = Annotated[float, Range(ge=0, le=1)]  # a probability
Positive = Annotated[float, Range(gt=0)]
NonNegative = Annotated[float, Range(ge=0)]
