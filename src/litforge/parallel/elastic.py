"""Runs started by `torchrun` (torch elastic): a restarted worker group must not meet its dead predecessor's ghosts.

torchrun (`--max-restarts=N`) restarts every worker when one dies, and the new workers reach each other through the
agent's TCPStore (`TORCHELASTIC_USE_AGENT_STORE=True`). In torch 2.14 `init_process_group`'s `env://` rendezvous uses
that store without a per-attempt prefix ("We create a new TCPStore for every retry", torch/distributed/rendezvous.py),
but the agent keeps one store for the whole job: on the restart, gloo read the previous attempt's rank addresses
and failed with "connectFullMesh failed ... Connection refused" (or hung). :func:`init_elastic_process_group` starts
the default process group itself, on the same store under a `litforge/attempt_<TORCHELASTIC_RESTART_COUNT>/`
prefix, before Lightning's strategy would: Lightning skips its own `init_process_group` when one exists, so every
strategy (ddp, fsdp, tp) gets the fresh rendezvous. Outside torchrun, or with the group already up, it does nothing.

Over several nodes the restart count is no common key: each node's agent counts its own restarts, and a node whose
worker died counts a failure (1) while the other may restart for the new rendezvous round, a membership change it
does not count (0). The two nodes then waited under different prefixes, each for the other, until the timeout (seen
with two network namespaces, tests/test_multinode.py). The workers have nothing else that names the round, so a
multi-node job that may restart is refused at start with the fix: `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` in every
node's launcher environment, torch's own opt-out, which gives every round a fresh store (rank 0's worker hosts it
at a new port; `TORCHELASTIC_USE_AGENT_STORE` is then False and this module stands aside).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytorch_lightning.strategies import Strategy

import torch
import torch.distributed as dist

from litforge.core.errors import ConfigError


def under_torchrun(env: Mapping[str, str] = os.environ) -> bool:
    """Whether torch elastic (torchrun) started this process and serves the rendezvous store."""
    return "TORCHELASTIC_RUN_ID" in env and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def check_restartable_across_nodes(env: Mapping[str, str] = os.environ) -> None:
    """Refuse a torchrun job over several nodes that may restart while its workers share the agent's store: after a
    restart the nodes' restart counts may differ, and so would their rendezvous prefixes (a hang, module docstring)."""
    nodes, restarts = int(env.get("GROUP_WORLD_SIZE", 1)), int(env.get("TORCHELASTIC_MAX_RESTARTS", 0))
    if under_torchrun(env) and nodes > 1 and restarts > 0:
        raise ConfigError(
            f"torchrun over {nodes} nodes with --max-restarts={restarts} shares one rendezvous store across "
            "restarts, so after a restart the nodes can wait for each other forever; set "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in every node's torchrun environment (a fresh store per restart; "
            "docs/distributed.md, several machines)"
        )


def init_elastic_process_group(strategy: Strategy, timeout: timedelta = timedelta(minutes=30)) -> bool:
    """Start the default process group on torchrun's store, prefixed by the restart count; True if it did."""
    if not under_torchrun() or not dist.is_available() or dist.is_initialized():
        return False
    if int(os.environ.get("WORLD_SIZE", 1)) <= 1 or not hasattr(strategy, "process_group_backend"):
        return False  # one process, or a strategy without a process group (single device)
    check_restartable_across_nodes()
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
