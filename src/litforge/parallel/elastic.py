"""Runs started by `torchrun` (torch elastic): a restarted worker group must not meet its dead predecessor's ghosts.

torchrun (`--max-restarts=N`) restarts every worker when one dies, and the new workers reach each other through the
agent's TCPStore (`TORCHELASTIC_USE_AGENT_STORE=True`). In torch 2.14 `init_process_group`'s `env://` rendezvous uses
that store without a per-attempt prefix ("We create a new TCPStore for every retry", torch/distributed/rendezvous.py),
but the agent keeps one store for the whole job: on the restart, gloo read the previous attempt's rank addresses
and failed with "connectFullMesh failed ... Connection refused" (or hung). :func:`init_elastic_process_group` starts
the default process group itself, on the same store under a `litforge/attempt_<TORCHELASTIC_RESTART_COUNT>/`
prefix, before Lightning's strategy would: Lightning skips its own `init_process_group` when one exists, so every
strategy (ddp, fsdp, tp) gets the fresh rendezvous. Outside torchrun, or with the group already up, it does nothing.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any


def under_torchrun(env: Any = os.environ) -> bool:
    """Whether torch elastic (torchrun) started this process and serves the rendezvous store."""
    return "TORCHELASTIC_RUN_ID" in env and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def init_elastic_process_group(strategy: Any, timeout: timedelta = timedelta(minutes=30)) -> bool:
    """Start the default process group on torchrun's store, prefixed by the restart count; True if it did."""
    import torch
    import torch.distributed as dist

    if not under_torchrun() or not dist.is_available() or dist.is_initialized():
        return False
    if int(os.environ.get("WORLD_SIZE", 1)) <= 1 or not hasattr(strategy, "process_group_backend"):
        return False  # one process, or a strategy without a process group (single device)
    backend = strategy.process_group_backend or ("nccl" if torch.cuda.is_available() else "gloo")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"litforge/attempt_{attempt}/", store),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timeout,
    )
    return True
