"""A real two-node SLURM cluster on this machine, for the tests marked `slurm` that need two nodes (and `.ci/run`).

`python tests/slurm_two_nodes.py` (root) starts, beside the single-node cluster of tests/slurm_cluster.py (whose
packages, munge key and `munged` it uses: it starts that cluster first), a second cluster `litforge2`:

- a bridge `lfs2br` in this namespace with 10.78.0.1/24, where its `slurmctld` listens (port 6837; its own
  `/etc/slurm-two-nodes/slurm.conf`, state folder and logs, so the single-node cluster runs on untouched);
- two nodes `n1` and `n2`, each a network namespace (`lfs2n1`, `lfs2n2`) joined to the bridge by a veth pair
  (10.78.0.11, 10.78.0.12), where `slurmd` runs with its own hostname (a UTS namespace: `nsenter --net=... unshare
  --mount --uts`, then `hostname nX`) and its own `/etc/hosts` (`/etc/netns/lfs2nX/hosts` bind-mounted in its mount
  namespace), so `n1` and `n2` resolve on both nodes (Lightning's SLURM environment takes the first node's hostname
  as MASTER_ADDR). Not `ip netns exec`: it mounts a fresh /sys, without the cgroup mounts Slurm 22.05's slurmd needs
  even with `proctrack/linuxproc` ("No filesystem mounted on /sys/fs/cgroup ... slurmd initialization failed").

Clients reach it with `SLURM_CONF=/etc/slurm-two-nodes/slurm.conf` (:data:`CONF`) in their environment; traffic
stays on the bridge and the veth pairs made here. `SlurmdTimeout=10`: a node that stops answering is DOWN within
about 10-20 s, and a running job with `--requeue` on it is requeued (NODE_FAIL). Idempotent as the single-node
helper: a cluster that already answers is reused; two callers at once serialise on a lock file.

`ensure_two_nodes()` returns None when both nodes are up, else the reason (not root, no `ip`/`unshare`, a daemon
that died): tests/test_slurm_requeue.py skips its two-node check with it, or fails under
`LITFORGE_REQUIRE_SLURM=1`. :func:`freeze_node`, :func:`kill_node` and :func:`start_node` are what a test does to
lose a node and bring it back.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_cluster  # noqa: E402  (the packages, munge and the first cluster)

CONF = Path("/etc/slurm-two-nodes/slurm.conf")
STATE = Path("/var/spool/slurmctld-two-nodes")
LOGS = Path("/var/log/slurm")
LOCK = Path("/tmp/litforge-slurm-two-nodes.lock")
BRIDGE, CONTROLLER = "lfs2br", "10.78.0.1"
NODES = {"n1": "10.78.0.11", "n2": "10.78.0.12"}
PORT = 6837
PARTITION = "two"
HEADER = "# written by litforge's tests/slurm_two_nodes.py: two nodes in network namespaces on this machine"


def netns(node: str) -> str:
    return f"lfs2{node}"


def slurm_conf() -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeAddr={addr} NodeHostname={name} CPUs=2 RealMemory=2048 State=UNKNOWN"
        for name, addr in NODES.items()
    )
    return f"""\
{HEADER}
ClusterName=litforge2
SlurmctldHost=localhost({CONTROLLER})
SlurmctldPort={PORT}
SlurmdPort={PORT + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
StateSaveLocation={STATE}
SlurmdSpoolDir=/var/spool/slurmd-two-nodes-%n
SlurmctldPidFile=/run/slurmctld-two-nodes.pid
SlurmdPidFile=/run/slurmd-two-nodes-%n.pid
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldLogFile={LOGS}/two-nodes-slurmctld.log
SlurmdLogFile={LOGS}/two-nodes-slurmd-%n.log
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _run(*cmd: str, timeout: float = 30, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def client_env() -> dict[str, str]:
    """This environment with `SLURM_CONF` naming the two-node cluster (for sbatch, squeue, scontrol ...)."""
    return {**os.environ, "SLURM_CONF": str(CONF)}


def node_states() -> dict[str, str]:
    """Each node's state as `sinfo` says it (`idle`, `alloc`, `down*`, ...); empty when nothing answers."""
    try:
        out = _run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10, env=client_env())
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0:
        return {}
    return dict(line.split() for line in out.stdout.strip().splitlines() if len(line.split()) == 2)


def is_up() -> bool:
    states = node_states()
    return all(states.get(n) in ("idle", "mix", "alloc", "comp") for n in NODES)


def _network() -> str | None:
    """The bridge, the two namespaces and their veth pairs (what exists already is kept)."""
    if _run("ip", "link", "show", BRIDGE).returncode != 0:
        for cmd in (
            ("ip", "link", "add", BRIDGE, "type", "bridge"),
            ("ip", "addr", "add", f"{CONTROLLER}/24", "dev", BRIDGE),
            ("ip", "link", "set", BRIDGE, "up"),
        ):
            out = _run(*cmd)
            if out.returncode != 0:
                return f"{' '.join(cmd)} failed: {out.stderr.strip()}"
    hosts = "127.0.0.1 localhost\n" + "".join(f"{addr} {name}\n" for name, addr in NODES.items())
    for name, addr in NODES.items():
        ns, host_end, node_end = netns(name), f"lfs2{name}h", f"lfs2{name}n"
        Path(f"/etc/netns/{ns}").mkdir(parents=True, exist_ok=True)
        Path(f"/etc/netns/{ns}/hosts").write_text(hosts)
        if _run("ip", "netns", "pids", ns).returncode == 0:
            continue
        for cmd in (
            ("ip", "netns", "add", ns),
            ("ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end),
            ("ip", "link", "set", node_end, "netns", ns),
            ("ip", "link", "set", host_end, "master", BRIDGE),
            ("ip", "link", "set", host_end, "up"),
            ("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", node_end),
            ("ip", "-n", ns, "link", "set", node_end, "up"),
            ("ip", "-n", ns, "link", "set", "lo", "up"),
        ):
            out = _run(*cmd)
            if out.returncode != 0:
                return f"{' '.join(cmd)} failed: {out.stderr.strip()}"
    return None


def node_pids(node: str) -> list[int]:
    """Every process in the node's network namespace (its slurmd, slurmstepd and the job's tasks)."""
    out = _run("ip", "netns", "pids", netns(node))
    return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []


def start_node(node: str) -> None:
    """Start the node's slurmd in its own network and UTS namespace, with the node's hostname."""
    log = LOGS / f"two-nodes-slurmd-{node}.out"
    hosts = f"/etc/netns/{netns(node)}/hosts"
    script = f"mount --bind {hosts} /etc/hosts && hostname {node} && exec slurmd -D -f {CONF} -N {node}"
    with open(log, "ab") as out:
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{netns(node)}", "unshare", "--mount", "--uts", "sh", "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def freeze_node(node: str) -> list[int]:
    """SIGSTOP every process of the node: it stops answering the controller and its peers, as a node that hangs."""
    pids = node_pids(node)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def kill_node(node: str) -> None:
    """SIGKILL every process of the node (its slurmd, the job step's slurmstepd and tasks): the node is lost."""
    for pid in node_pids(node):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_up(timeout: float = 60) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = node_states()
        if all(states.get(n) in ("idle", "mix", "alloc", "comp") for n in NODES):
            return None
        for name, state in states.items():
            if state.startswith(("down", "drain")) and not state.endswith("*"):
                _run("scontrol", "update", f"nodename={name}", "state=resume", env=client_env())
        time.sleep(0.5)
    return f"the two SLURM nodes did not come up within {timeout:.0f} s ({node_states()}; see {LOGS}/two-nodes-*.log)"


def _start() -> str | None:
    if os.geteuid() != 0:
        return "a two-node SLURM cluster needs root (network namespaces, daemons as SlurmUser=root)"
    if shutil.which("ip") is None and shutil.which("apt-get") is not None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "iproute2"], capture_output=True, env=env, check=False)
    if not (shutil.which("ip") and shutil.which("unshare") and shutil.which("nsenter")):
        return "a two-node SLURM cluster needs iproute2's `ip` and util-linux's `unshare` and `nsenter`"
    problem = slurm_cluster.ensure_cluster() or _network()  # the packages, munge (shared) and the first cluster
    if problem:
        return problem
    for folder in (STATE, LOGS):
        folder.mkdir(parents=True, exist_ok=True)
    CONF.parent.mkdir(parents=True, exist_ok=True)
    if not CONF.exists() or CONF.read_text() != slurm_conf():
        CONF.write_text(slurm_conf())
    if _run("pgrep", "-f", f"slurmctld -D -i -f {CONF}").returncode != 0:
        with open(LOGS / "two-nodes-slurmctld.out", "ab") as out:
            subprocess.Popen(
                ["slurmctld", "-D", "-i", "-f", str(CONF)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    for name in NODES:
        if not any(_is_slurmd(pid) for pid in node_pids(name)):
            start_node(name)
    return wait_up()


def _is_slurmd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd"
    except OSError:
        return False


def ensure_two_nodes() -> str | None:
    """Start the two-node cluster unless it is up; None when it is up, else why it is not."""
    if is_up():
        return None
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return None if is_up() else _start()
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the two-node SLURM cluster did not start: {exc}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


if __name__ == "__main__":
    reason = ensure_two_nodes()
    if reason:
        print(f"slurm two nodes: {reason}", file=sys.stderr)
        sys.exit(1)
    print(f"slurm two nodes: up ({node_states()}, SLURM_CONF={CONF})")
