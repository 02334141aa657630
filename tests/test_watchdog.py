"""litforge.runtime.watchdog in the case issue 18 found: a rank blocked in a gloo collective that its peer never joins.

While the main thread waits inside the collective (C++), no Python signal handler runs; the watchdog is woken by
the wakeup fd that CPython's C handler writes at once, so the process still ends hang_grace after SIGTERM, with
the blocked frame in its stack dump. Two real processes, no Lightning (seconds, not a CLI run).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

pytestmark = pytest.mark.distributed

RANK = textwrap.dedent("""
    import os, signal, sys, threading, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from litforge.runtime.watchdog import HangWatchdog

    rank, port = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=300))
    signal.signal(signal.SIGTERM, lambda *_: print("handler ran", flush=True))  # a flag-setting handler, as Lightning's
    if rank == 1:
        time.sleep(300)  # never joins the collective
    HangWatchdog(1.0, key="hang_grace").arm()

    def blocked_in_all_reduce():
        dist.all_reduce(torch.ones(4))

    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    print(f"BLOCKING {time.time():.3f}", flush=True)
    blocked_in_all_reduce()
    print("all_reduce returned", flush=True)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_blocked_in_a_collective_ends_after_the_grace_with_its_stack():
    port = str(_free_port())
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    peer = subprocess.Popen(
        [sys.executable, "-c", RANK, "1", port], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        blocked = subprocess.run(
            [sys.executable, "-c", RANK, "0", port], env=env, capture_output=True, text=True, timeout=120
        )
        ended = time.time()
    finally:
        peer.send_signal(signal.SIGKILL)
        peer.wait()
    assert blocked.returncode == 143, blocked.stdout + blocked.stderr
    assert "all_reduce returned" not in blocked.stdout
    started = float(blocked.stdout.split("BLOCKING ")[1].split()[0])
    assert 1.0 + 1.0 <= ended - started < 2.0 + 10, "SIGTERM 1 s in, then the 1 s grace, plus a few seconds"
    assert "still running 1 s after SIGTERM" in blocked.stderr and "hang_grace=<seconds>" in blocked.stderr
    assert "in blocked_in_all_reduce" in blocked.stderr, blocked.stderr[-3000:]  # the dump names the blocked frame
