"""End a process that SIGTERM could not stop: after a grace period, dump every thread's stack and exit 143.

Why: Lightning's SIGTERM handler (and litforge's) only sets a flag that the training loop reads at the next step
boundary. A rank blocked in a collective that its peers never join (mismatched collectives under fsdp, a dead peer
on NCCL) never reaches that boundary, and a job ignored SIGTERM for 14 minutes until the scheduler's SIGKILL
(issue 18). Worse, CPython runs a Python signal handler only when the main thread returns to the interpreter, so
while it is blocked in C no Python handler runs at all.

How: `signal.set_wakeup_fd` makes CPython's C-level handler write each signal's number to a pipe *at once*, even
while the main thread is blocked in C. A daemon thread reads that pipe; at SIGTERM it waits `grace_s`. If the
process has not ended by then (the normal path, a checkpoint at the next step and exit 143, takes far less), it
writes one line saying so, dumps every thread's stack with `faulthandler` (to stderr and to the run's log file, so
the log says where it hung) and ends the process with `os._exit(143)`. `os._exit` runs no cleanup: nothing is
deleted, a checkpoint being written atomically leaves the previous file whole (litforge.checkpointing.io).
Neither Lightning nor torch offers this (Lightning-AI/pytorch-lightning issue 21487 is about the SIGTERM flag's
per-step broadcast; a timeout on every collective, the other way to end a hang, also ends healthy slow steps).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
from typing import TextIO

EXIT_CODE = 143  # 128 + SIGTERM: what the normal SIGTERM path exits with too (litforge.callbacks.training.fit_or_stop)


def run_log_file() -> str | None:
    """The file the root logger writes to (Hydra's `<run folder>/<task>.log`), where the stack dump also goes."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.baseFilename != os.devnull:
            return handler.baseFilename
    return None


class HangWatchdog:
    """`arm()` on the main thread; from the first SIGTERM on, the process ends within `grace_s` seconds.

    `disarm()` stops watching for new signals (and restores any previous wakeup fd) but never stops a grace
    period already running: once SIGTERM has arrived the process is meant to end. `cancel()` stops that too (for
    code that handles SIGTERM and means to go on, e.g. a test process).
    """

    def __init__(
        self, grace_s: float, *, key: str = "callbacks.checkpoint_on_signal.hang_grace", log_file: str | None = None
    ) -> None:
        self.grace_s = float(grace_s)
        self.key = key  # named in the message, so the user knows what to raise
        self.log_file = log_file
        self.fired = threading.Event()  # SIGTERM seen
        self._cancelled = threading.Event()
        self._write_fd: int | None = None
        self._previous_fd = -1

    @property
    def armed(self) -> bool:
        return self._write_fd is not None

    def arm(self) -> bool:
        """Start watching; False where it cannot (not the main thread: only it may set the wakeup fd)."""
        if self.armed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C handler must never block on a full pipe
        try:
            self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:
            os.close(read_fd)
            os.close(write_fd)
            return False
        self._write_fd = write_fd
        threading.Thread(target=self._watch, args=(read_fd,), name="litforge-hang-watchdog", daemon=True).start()
        return True

    def disarm(self) -> None:
        if self._write_fd is None:
            return
        if threading.current_thread() is threading.main_thread():
            current = signal.set_wakeup_fd(self._previous_fd)
            if current != self._write_fd:  # someone set theirs after us: keep it
                signal.set_wakeup_fd(current)
        os.close(self._write_fd)  # the watching thread reads end-of-file and returns (unless already in grace)
        self._write_fd = None

    def cancel(self) -> None:
        self._cancelled.set()
        self.disarm()

    def _watch(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while not self.fired.is_set():
                data = pipe.read(512)
                if not data:
                    return
                if self._previous_fd >= 0:  # whoever had the wakeup fd before us still gets its signals
                    try:
                        os.write(self._previous_fd, data)
                    except OSError:
                        pass
                if signal.SIGTERM in data:
                    self.fired.set()
        if not self._cancelled.wait(self.grace_s):
            self._end()

    def _end(self) -> None:
        line = (
            f"litforge: error: still running {self.grace_s:g} s after SIGTERM, so it is stuck where the stacks "
            f"below show (e.g. a collective another rank never joined); ending it with exit code {EXIT_CODE}. "
            f"Checkpoints and logs are kept; give the normal stop more time with {self.key}=<seconds>\n"
        )
        _dump(sys.stderr, line)
        if self.log_file:
            try:
                with open(self.log_file, "a", encoding="utf-8") as log:
                    _dump(log, line)
            except OSError:
                pass
        os._exit(EXIT_CODE)


def _dump(stream: TextIO, line: str) -> None:
    try:
        stream.write(line)
        stream.flush()
        faulthandler.dump_traceback(file=stream, all_threads=True)
        stream.flush()
    except (OSError, ValueError, AttributeError):  # a closed or fd-less stream: the other one still gets it
        pass
