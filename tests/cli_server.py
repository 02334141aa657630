"""A warm process that runs litforge's CLI scripts in forked children, so each test's CLI run skips the imports.

Why: a `python train.py ...` here spends 8-15 s importing torch, Lightning, Hydra and torchvision before it reads its
first override, and the suite runs ~70 such commands: most of its time. This server imports them once (no torch op
runs in it, so no thread pool exists to break in a fork), then for each request forks a child that becomes what
`python <script> <args>` would be: its own process group, the given cwd and environment (PYTHONPATH entries put on
sys.path as the interpreter would), stdin from /dev/null, stdout/stderr to the given files, fresh random seeds, the
script run as `__main__`, and an exit as the interpreter's (threads joined, atexit handlers run, exit code as Python
sets it), without its object-by-object teardown (`_exit_as_python_would`).
What it cannot reproduce: environment variables read while torch/Lightning import (e.g. CUDA_VISIBLE_DEVICES,
OMP_NUM_THREADS); tests that depend on those, on import time or on the interpreter's start-up use
`run_cli(..., fresh_process=True)`.

Protocol (one JSON object per line): request {"argv", "cwd", "env", "stdout", "stderr"} on stdin; answers
{"pid": child pid} at once, then {"returncode": rc} (negative signal number when killed, as subprocess reports).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable


def _warm_up() -> None:
    """Import what every CLI run needs. A real run imports Lightning after Hydra has configured logging, so
    Lightning sees a root handler and lets its records propagate (into the run's train.log); a placeholder root
    handler during these imports keeps that so."""
    import logging

    placeholder = logging.NullHandler()
    logging.getLogger().addHandler(placeholder)
    try:
        _import_heavy_modules()
    finally:
        logging.getLogger().removeHandler(placeholder)


def _import_heavy_modules() -> None:
    import hydra  # noqa: F401
    import omegaconf  # noqa: F401
    import pytorch_lightning  # noqa: F401
    import torch  # noqa: F401
    import torchmetrics  # noqa: F401
    import torchvision  # noqa: F401
    from torch.utils import tensorboard  # noqa: F401  (every run's TensorBoard logger: ~0.15 s of CPU per child)

    import litforge.cli.main  # noqa: F401
    import litforge.jobs.train  # noqa: F401


def _serve() -> dict | None:
    """Answer requests until stdin closes (None); in a forked child, return that child's request."""
    import gc

    # the warm heap goes to the permanent generation: a child's garbage collections then skip it, so they neither
    # walk the server's objects nor copy their pages (2.0 s → 0.7 s for a run refused at its first check)
    gc.freeze()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    return None


def _become(request: dict) -> None:
    """Turn this forked child into `python <argv...>` started in request["cwd"] with request["env"]."""
    import random

    os.setpgid(0, 0)  # its own group, like a subprocess the test may kill with its children
    for fd, target, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY),
        (2, request["stderr"], os.O_WRONLY),
    ):
        handle = os.open(target, flags)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = os.path.abspath(request["argv"][0])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(script), *extra, *[p for p in sys.path[1:] if p not in extra]]
    sys.argv = [script, *request["argv"][1:]]
    random.seed()  # a fresh interpreter seeds from the OS: forked children must not share the server's state
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _run_script() -> None:
    import runpy

    runpy.run_path(sys.argv[0], run_name="__main__")


def _exit_as_python_would(main: Callable[[], None]) -> None:
    """Run `main`, then end the process as the interpreter would, without tearing down its objects.

    Why: a forked child that ran Python's own finalisation spent about 1.3 s of CPU there (the server's whole heap,
    torch and Lightning included, is freed object by object, and every page it touches is copied first): more than
    a refusal of a bad value costs in a fresh process. With it and `gc.freeze` a refused run takes 0.3 s instead of
    2.0 s, a 2-epoch training run 2.1 s instead of 3.8 s, and `pytest -n 0` of test_bad_input, test_output and
    test_tabular 61 s instead of 160 s. What a user can observe of an exit is kept: the exit code
    (SystemExit's, 1 after an uncaught exception printed by sys.excepthook, death by SIGINT after Ctrl-C), non-daemon
    threads joined (litforge's background checkpoint writes), then the atexit handlers (logging, loggers), then the
    standard streams flushed.
    """
    import signal
    import threading

    code, interrupted = 0, False
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        interrupted = True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first: join non-daemon threads
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:  # Python ≥ 3.8 ends an interrupted program by SIGINT, so its parent sees -2
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    import signal

    # Ctrl-C as a user's terminal delivers it: a job started in the background of a non-interactive shell (a CI
    # runner's `cmd &`) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _warm_up()
    child_request = _serve()
    if child_request is not None:
        _become(child_request)
        _exit_as_python_would(_run_script)
