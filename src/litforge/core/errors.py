"""User-facing errors.

Anything a user can fix by changing a config value, a path or a file raises :class:`LitforgeError`. The CLI
entry points catch it and print only its message (no traceback), so the message must name the problem *and* the
fix. Library bugs keep raising ordinary exceptions so their tracebacks stay visible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class LitforgeError(Exception):
    """A mistake in the user's config, data or files; the message says how to fix it. A check that reports every
    mistake of a command raises one error with a line per mistake (`ConfigError(*lines)`; the CLI prints each)."""

    def __str__(self) -> str:
        return "\n".join(map(str, self.args))

    @property
    def lines(self) -> list[str]:
        return [str(line) for line in self.args] or [type(self).__name__]


class ConfigError(LitforgeError):
    """An option, value or combination of options that cannot work."""


class DataError(LitforgeError):
    """Data that is missing, empty or malformed."""


class CheckpointError(LitforgeError):
    """A checkpoint path that does not exist, or a file that is not a usable litforge checkpoint."""


class TrainingStopped(LitforgeError):
    """Training ended early for a reason the user must act on (a non-finite loss, a termination signal).

    `exit_code` lets a scheduler tell a pre-empted run (128 + signal number, as a shell reports it) from a failure.
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def refuse_each(found: list[LitforgeError], *checks: Callable[[], object]) -> list[LitforgeError]:
    """Run every check (each judges values of its own) and add each refusal to `found`: every mistake, not the first.
    Once a mistake is found, a later check that stumbles on a value already refused (a TypeError on
    `trainer.num_nodes=abc`) adds nothing: that value's own line says it."""
    for check in checks:
        try:
            check()
        except LitforgeError as exc:
            found.append(exc)
        except (TypeError, ValueError, AttributeError, KeyError):
            if not found:
                raise
    return found


def raise_found(found: Sequence[LitforgeError]) -> None:
    """One error for all the refusals: a lone one as it is (its type says what it is), several as one ConfigError."""
    if len(found) == 1:
        raise found[0]
    if found:
        raise ConfigError(*(line for exc in found for line in exc.lines))
