"""User-facing errors.

Anything a user can fix by changing a config value, a path or a file raises :class:`LitforgeError`. The CLI
entry points catch it and print only its message (no traceback), so the message must name the problem *and* the
fix. Library bugs keep raising ordinary exceptions so their tracebacks stay visible.
"""

from __future__ import annotations


class LitforgeError(Exception):
    """A mistake in the user's config, data or files; the message says how to fix it."""


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
