"""Durations and intervals as a user types them: `30min`, `3h55min`, `90s`, `2d`, SLURM's `04:00:00`.

Torch-free: the config check (litforge.config.settings) judges `checkpoint_every` and `time_limit` with these before a
job starts, and the callbacks that act on them (litforge.checkpointing.clock, .time_limit) parse the same way.
"""

from __future__ import annotations

import re

UNITS = {"d": 86400.0, "h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|min|m|s)")
_CLOCK = re.compile(r"(?:(\d+)[-:])?(\d+):(\d{1,2}):(\d{1,2})")  # [D-]HH:MM:SS or [D:]HH:MM:SS (SLURM, Lightning)


def parse_duration(value: object) -> float | None:
    """Seconds in `value` (`3h55min`, `30min`, `90s`, `1.5h`, `04:00:00`, `1-00:00:00`), or None if it is not one.

    A bare number is not a duration (seconds or steps?): the caller decides what it means.
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace(" ", "")
    clock = _CLOCK.fullmatch(text)
    if clock:
        days, hours, minutes, seconds = (int(g or 0) for g in clock.groups())
        return float(days * 86400 + hours * 3600 + minutes * 60 + seconds)
    parts = list(_PART.finditer(text))
    if not parts or "".join(p.group(0) for p in parts) != text:
        return None
    return sum(float(p.group(1)) * UNITS[p.group(2)] for p in parts)


def parse_every(value: object) -> tuple[str, float] | None:
    """`500` → ("steps", 500); `30min` → ("seconds", 1800.0); None when `value` is neither (or not positive)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("steps", float(value)) if value >= 1 else None
    if isinstance(value, str) and value.strip().isdigit():
        return ("steps", float(value)) if int(value) >= 1 else None
    seconds = parse_duration(value)
    return ("seconds", seconds) if seconds is not None and seconds > 0 else None


def is_time_limit(value: object) -> bool:
    """What `time_limit` takes: `auto` (SLURM's job end time when under SLURM) or a positive duration."""
    if value == "auto":
        return True
    seconds = parse_duration(value)
    return seconds is not None and seconds > 0
