"""Lightning's per-rank script relaunch, made to work with Hydra run folders and multiruns.

With `strategy=ddp` (and `fsdp`, `tp`, ...) on one machine, Lightning starts ranks 1..N-1 by running the script
again (`_SubprocessScriptLauncher`). Under Hydra its stock command repeats `sys.argv` and adds
`hydra.run.dir=<hydra.run.dir>`. That is right for a single run (litforge caches `${now:}`/`${uid:}`, so the
folder name is fixed before any rank starts), but wrong in a multirun: `sys.argv` still holds `-m` and the sweep
values, so every rank would start a sweep of its own in a new folder. :func:`rank_command` instead rebuilds the
command from the job Hydra is running: its resolved overrides (`seed=1`, not `seed=1,2,3`), its config search path
(`hydra.searchpath`, which is not among those overrides) and its output folder.

Ranks > 0 run as plain single runs with `hydra.output_subdir=null` (only rank 0 writes `.hydra/`); the log file
handler of non-zero ranks points at the null device (see the `rank_zero_path` resolver in `litforge.runtime.ranks`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_original_cwd, to_absolute_path

from litforge.runtime.override_text import override_text

# Hydra options that choose the config itself and so must reach every rank (the overrides do not carry them)
_CONFIG_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
# the words between the program and its overrides: `litforge train ...` starts its ranks as `litforge train ...`
# (set by litforge.cli.command; empty for `python train.py`)
ENTRY_ARGS: list[str] = []
# what Lightning's launcher writes into os.environ of the launching process
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")  # what a launcher exports


def config_flags(argv: Sequence[str]) -> list[str]:
    """The `--config-name x` / `-cn=x` style arguments of a Hydra command line."""
    out: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in _CONFIG_FLAGS:
            out.append(arg)
            if "=" not in arg and i + 1 < len(args):
                out.append(args[i + 1])
    return out


def rank_command(local_rank: int) -> tuple[list[str], str]:
    """(command, cwd) that starts `local_rank` of the current Hydra job in the same run folder."""
    import __main__  # read at call time: runpy swaps __main__

    hydra_cfg = HydraConfig.get()
    if __main__.__spec__ is None:
        command = [sys.executable, to_absolute_path(sys.argv[0]), *ENTRY_ARGS]
    else:
        command = [sys.executable, "-m", __main__.__spec__.name, *ENTRY_ARGS]
    command += config_flags(sys.argv[1:])
    command += list(hydra_cfg.overrides.task)
    if hydra_cfg.searchpath:  # a user's own conf folder (docs/extending.md): rank 0 composed from it, so must all
        command.append(f"hydra.searchpath={override_text(list(hydra_cfg.searchpath))}")
    output_dir = hydra_cfg.runtime.output_dir
    command += [
        f'hydra.run.dir="{output_dir}"',
        f"hydra.job.name={hydra_cfg.job.name}_rank{local_rank}",
        "hydra.output_subdir=null",
    ]
    return command, get_original_cwd()


def install() -> None:
    """Route Lightning's Hydra relaunch through :func:`rank_command` (idempotent)."""
    from litforge.runtime.compat import route_hydra_relaunch  # torch-free `litforge <job>`: cli.command imports launch

    route_hydra_relaunch(rank_command)


@contextmanager
def launched_ranks_cleaned_up() -> Iterator[None]:
    """Leave the process as it was after a job that launched ranks, so the next job of a multirun can launch again.

    Lightning's launcher exports MASTER_PORT/LOCAL_RANK/... into this process and the process group stays
    initialised; a second job would then believe its ranks were started externally and wait for them forever.
    """
    saved = {key: os.environ.get(key) for key in LAUNCH_ENV}
    try:
        yield
    finally:
        if "torch.distributed" in sys.modules:  # keeps the CLI free of torch when the job never imported it
            import torch.distributed as dist  # torch-free `litforge <job>`: only once the job imported it

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
