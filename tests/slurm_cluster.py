"""A real single-node SLURM cluster on this machine, for the tests marked `slurm` (and `.ci/run`).

`python tests/slurm_cluster.py` (root) installs Debian's `slurm-wlm` and `munge` when they are missing, writes
`/etc/slurm/slurm.conf` for one CPU-only node sized from this machine (`nproc`, memory), starts `munged`, `slurmctld
-D -i` and `slurmd -D -N localhost` in the background (no systemd), and waits until the node is idle. It is
idempotent: a cluster that already answers (`sinfo` shows the node up) is reused as it is, and two callers at once
(pytest's workers) serialise on a lock file. It runs without systemd or cgroups: `SlurmUser=root`,
`proctrack/linuxproc`, `task/none` (no cgroups), no accounting daemon (`accounting_storage/none`; job states come
from `scontrol show job` and `jobcomp/filetxt`), `JobRequeue=1`, and `AuthInfo=cred_expire=10` so a requeued job
starts again after 10 s rather than 120 s (a job step's credential is checked within a second of its launch
here); the scheduler looks at pending jobs every 5 s
(`SchedulerParameters=sched_interval=5,bf_interval=5`; 60 and 30 s by default), so a requeued job starts within
seconds of the end of that wait rather than up to a minute later. The partition lets up to four jobs share a core
(`OverSubscribe=FORCE:4`), so the tests' small jobs run side by side on a 2-core machine.

`ensure_cluster()` returns None when the cluster is up, else the reason it could not start (not root, no package
manager, a daemon that died): the `slurm_cluster` fixture in tests/conftest.py skips with that reason, or fails when
`LITFORGE_REQUIRE_SLURM=1` (CI).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
STATE = Path("/var/spool/slurmctld")
SPOOL = Path("/var/spool/slurmd")
LOGS = Path("/var/log/slurm")
LOCK = Path("/tmp/litforge-slurm-cluster.lock")
NODE = "localhost"
PARTITION = "debug"
PACKAGES = ("slurm-wlm", "munge")
HEADER = "# written by litforge's tests/slurm_cluster.py: one CPU-only node on this machine"


def node_facts() -> tuple[int, int]:
    """(CPUs, memory in MB) of this machine, as the node declares them (memory less a 10% reserve)."""
    cpus = os.cpu_count() or 1
    mem_kb = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return cpus, max(256, int(mem_kb / 1024 * 0.9))


def slurm_conf() -> str:
    cpus, mem_mb = node_facts()
    return f"""\
{HEADER}
ClusterName=litforge
SlurmctldHost={NODE}
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
StateSaveLocation={STATE}
SlurmdSpoolDir={SPOOL}
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={LOGS}/jobcomp.log
SlurmctldLogFile={LOGS}/slurmctld.log
SlurmdLogFile={LOGS}/slurmd.log
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def node_state() -> str | None:
    """The node's state as `sinfo` says it (`idle`, `mixed`, `alloc`, `down*`, ...), None when nothing answers."""
    if shutil.which("sinfo") is None:
        return None
    try:
        out = _run("sinfo", "-h", "-N", "-o", "%t", timeout=10)
    except subprocess.TimeoutExpired:
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def is_up() -> bool:
    return node_state() in ("idle", "mix", "alloc", "comp")


def _install() -> str | None:
    if all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch")):
        return None
    if shutil.which("apt-get") is None:
        return "slurm-wlm is not installed and there is no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    out = subprocess.run(
        ["apt-get", "install", "-y", "-q", *PACKAGES], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        update = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, check=False)
        out = subprocess.run(
            ["apt-get", "install", "-y", "-q", *PACKAGES], capture_output=True, text=True, env=env, check=False
        )
        if out.returncode != 0:
            tail = (out.stderr or update.stderr).strip().splitlines()[-1:] or ["?"]
            return f"apt-get install {' '.join(PACKAGES)} failed: {tail[0]}"
    return None


def _start_munge() -> str | None:
    key = Path("/etc/munge/munge.key")
    if _run("munge", "-n").returncode == 0:
        return None
    if not key.exists() or key.stat().st_size < 1024:
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
    for folder in (key.parent, Path("/var/lib/munge"), Path("/var/log/munge"), Path("/run/munge")):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.chown(folder, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    started = _run("runuser", "-u", "munge", "--", "munged")
    if started.returncode != 0 and _run("munge", "-n").returncode != 0:
        return f"munged did not start: {started.stderr.strip() or started.stdout.strip()}"
    return None


def _daemon(*cmd: str, log: Path) -> None:
    """Start a SLURM daemon in the foreground mode (-D), detached from this process and its session."""
    with open(log.with_suffix(".out"), "ab") as out:
        subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _start() -> str | None:
    if os.geteuid() != 0:
        return "starting a SLURM cluster needs root (the daemons run as SlurmUser=root)"
    problem = _install() or _start_munge()
    if problem:
        return problem
    for folder in (STATE, SPOOL, LOGS):
        folder.mkdir(parents=True, exist_ok=True)
    CONF.parent.mkdir(parents=True, exist_ok=True)
    if CONF.exists() and not CONF.read_text().startswith(HEADER):
        return f"{CONF} is there and not litforge's test cluster's: not replacing it (start that cluster instead)"
    if not CONF.exists() or CONF.read_text() != slurm_conf():
        CONF.write_text(slurm_conf())
    if _run("pgrep", "-x", "slurmctld").returncode != 0:
        _daemon("slurmctld", "-D", "-i", log=LOGS / "slurmctld")
    if _run("pgrep", "-x", "slurmd").returncode != 0:
        _daemon("slurmd", "-D", "-N", NODE, log=LOGS / "slurmd")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = node_state()
        if state in ("idle", "mix", "alloc", "comp"):
            return None
        if state is not None and state.startswith(("down", "drain")):
            _run("scontrol", "update", f"nodename={NODE}", "state=resume")
        time.sleep(0.5)
    return f"the SLURM node did not come up within 60 s (state {node_state()}; see {LOGS}/slurmctld.log)"


def ensure_cluster() -> str | None:
    """Start the cluster unless it is up; None when it is up, else why it is not. A running cluster of an older
    version of this file gets today's slurm.conf (`scontrol reconfigure`: its jobs run on)."""
    if is_up():
        if CONF.exists() and CONF.read_text().startswith(HEADER) and CONF.read_text() != slurm_conf():
            CONF.write_text(slurm_conf())
            _run("scontrol", "reconfigure")
        return None
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest worker may be starting it
        try:
            return None if is_up() else _start()
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the SLURM cluster did not start: {exc}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


if __name__ == "__main__":
    reason = ensure_cluster()
    if reason:
        print(f"slurm cluster: {reason}", file=sys.stderr)
        sys.exit(1)
    print(f"slurm cluster: up ({_run('sinfo', '-h', '-N', '-o', '%N %t %c CPUs').stdout.strip()})")
