"""Two nodes over real network stacks: two Linux network namespaces joined by a veth pair, one `torchrun` in each
(c10d rendezvous, gloo over the veth), running the real CLI. DDP and FSDP train, a node's worker is SIGKILLed mid-run,
torchrun restarts the group (`--max-restarts=1`), `resume=auto` continues from the last checkpoint, and the result
equals a one-process run on the same global batch (2 x 16 = 32). The recipe is docs/distributed.md's "Several
machines"; each test makes its own namespaces (names from the pytest worker's pid) and removes them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY, read_metrics, run_cli, single_run, skip_unless_required

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.netns]

# 2 epochs of 4 batches; checkpoint_every=3 saves last.ckpt at steps 3, 4 (epoch end) and 6 (mid-epoch 1); node 1's
# worker is SIGKILLed after step 7 in the first attempt, so the restarted group resumes from step 6.
COMMON = [
    *TINY,
    "trainer.accelerator=cpu",
    "callbacks.early_stopping=null",
    "model.dropout=0.0",
    "logger=csv",
    "checkpoint_every=3",
]
KILL = [
    "+callbacks.fault._target_=faults.SignalAt",
    "+callbacks.fault.step=7",
    "+callbacks.fault.signal=SIGKILL",
    "+callbacks.fault.rank=1",
    "+callbacks.fault.attempt=0",
]
RDZV_PORT = 29400  # each namespace has its own ports: no clash with anything outside it


@dataclass(frozen=True)
class Node:
    netns: str  # the network namespace
    dev: str  # its end of the veth pair
    addr: str  # its address on the veth


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None when they can): root and iproute2 are needed."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "`ip netns add` needs root"
    return None


@contextmanager
def two_nodes(tag: str) -> Iterator[tuple[Node, Node]]:
    """Two namespaces, each with its end of one veth pair (10.77.0.1 and .2) and its loopback, removed on exit.
    Names carry the pytest worker's pid and `tag`, so parallel workers never share a namespace; the addresses may
    repeat across pairs, each pair being a network of its own."""
    reason = netns_unavailable()
    if reason:  # a failure under LITFORGE_REQUIRE_NETNS=1 (.ci/run installs iproute2 and sets it)
        skip_unless_required("LITFORGE_REQUIRE_NETNS", f"two-node test needs network namespaces: {reason}")
    base = f"lf{os.getpid() % 100000}{tag}"  # interface names have at most 15 characters
    nodes = tuple(Node(f"{base}n{i}", f"{base}v{i}", f"10.77.0.{i + 1}") for i in (0, 1))
    for node in nodes:  # left by a killed earlier process with this pid, if any: the names are this process's
        ip("netns", "del", node.netns)
    ip("link", "del", nodes[0].dev)
    made: list[str] = []
    try:
        for node in nodes:
            result = ip("netns", "add", node.netns)
            if result.returncode != 0 and any(w in result.stderr.lower() for w in ("not permitted", "denied")):
                skip_unless_required(
                    "LITFORGE_REQUIRE_NETNS", f"two-node test needs network namespaces: `ip netns add`: {result.stderr}"
                )
            assert result.returncode == 0, f"ip netns add {node.netns}: {result.stderr}"
            made.append(node.netns)
        steps = [
            ("link", "add", nodes[0].dev, "type", "veth", "peer", "name", nodes[1].dev),
            *(("link", "set", n.dev, "netns", n.netns) for n in nodes),
            *(("-n", n.netns, "addr", "add", f"{n.addr}/24", "dev", n.dev) for n in nodes),
            *(("-n", n.netns, "link", "set", dev, "up") for n in nodes for dev in (n.dev, "lo")),
        ]
        for step in steps:
            result = ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        yield nodes  # type: ignore[misc]
    finally:
        for name in made:
            ip("netns", "del", name)  # also removes the veth pair


def node_command(node: Node, rank: int, master: Node, run_id: str, args: list[str]) -> tuple[list[str], dict]:
    """One node's launcher: `ip netns exec <ns> torchrun ...` and its environment (docs/distributed.md)."""
    cmd = [
        "ip",
        "netns",
        "exec",
        node.netns,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={master.addr}:{RDZV_PORT}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host={int(rank == 0)},join_timeout=120",
        f"--local-addr={node.addr}",
        "--max-restarts=1",
        str(ROOT / "train.py"),
        *args,
    ]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
        "GLOO_SOCKET_IFNAME": node.dev,  # gloo's traffic on the veth
        # a fresh bootstrap store per rendezvous round: with the agent's shared store, a restarted node read the
        # dead worker's gloo address from the previous round and failed to connect (torch 2.14)
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    return cmd, env


def veth_bytes(node: Node) -> int:
    stats = json.loads(ip("-n", node.netns, "-s", "-j", "link", "show", "dev", node.dev).stdout)[0]["stats64"]
    return int(stats["rx"]["bytes"])


def run_two_nodes(nodes: tuple[Node, Node], run_id: str, args: list[str], timeout: float = 240) -> list[str]:
    procs = []
    for rank, node in enumerate(nodes):
        cmd, env = node_command(node, rank, nodes[0], run_id, args)
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: a timeout kills the launcher and its workers
            )
        )
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], f"exit codes {codes}\n" + "\n=====\n".join(o[-3000:] for o in outputs)
    return outputs


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    log_dir = tmp_path_factory.mktemp("one")
    result = run_cli("train.py", *COMMON, "data.batch_size=32", log_dir=log_dir)
    assert result.returncode == 0, result.output[-3000:]
    return single_run(log_dir)


# strategy -> weights tolerance against one process at batch 32: the gradient of 2 x 16 samples averaged by gloo
# differs from one batch of 32 in float rounding (as tests/test_elastic.py measures for one node)
STRATEGIES = {"ddp": 2e-5, "fsdp": 2e-5}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_two_network_namespaces_train_survive_a_killed_node_and_equal_one_process(strategy, one_process, tmp_path):
    from litforge.checkpointing.load import load_checkpoint

    run_dir = tmp_path / "logs" / "train" / "runs" / "two-nodes"
    args = [
        f"paths.log_dir={tmp_path / 'logs'}",
        f"hydra.run.dir={run_dir}",  # both nodes write one run folder (a shared file system)
        "resume=auto",
        f"strategy={strategy}",
        "trainer.num_nodes=2",
        "trainer.devices=1",
        "data.batch_size=16",
        *COMMON,
        *KILL,
    ]
    with two_nodes(strategy[0]) as nodes:
        outputs = run_two_nodes(nodes, f"litforge-{tmp_path.name}", args)
        crossed = [veth_bytes(node) for node in nodes]
    assert "FAULT SIGKILL rank 1" in outputs[1], "node 1's worker was not killed: nothing was tested"
    for output in outputs:  # each node's restarted worker continued the run from its step-6 checkpoint
        assert f"Resuming from {run_dir / 'checkpoints' / 'last.ckpt'}" in output, output[-3000:]
    assert all(n > 100_000 for n in crossed), f"bytes received over the veth: {crossed}"

    expected = load_checkpoint(one_process / "checkpoints" / "last.ckpt")
    got = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")  # fsdp: the sharded folder, consolidated
    assert (got["epoch"], got["global_step"]) == (expected["epoch"], expected["global_step"]) == (1, 8)
    assert got["state_dict"].keys() == expected["state_dict"].keys()
    for name, tensor in expected["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][name], tensor, atol=STRATEGIES[strategy], rtol=1e-4, msg=name)
    want, have = read_metrics(one_process)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("val/acc", "test/acc"):
        assert have[name] == pytest.approx(want[name], abs=1e-6), name
