"""What the `train.py`/`eval.py`/`predict.py` entry points share: resolvers, error reporting, console output.

Kept free of torch and Lightning imports: Hydra composes the config (and answers `--help`, `--cfg job`) before any
job runs, and that must stay fast.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from litforge.errors import LitforgeError

log = logging.getLogger("litforge")


def _register_resolvers() -> None:
    # A short random tag after the timestamp keeps run folders apart when jobs start in the same second.
    # use_cache: every later resolution of the same config (Lightning reads hydra.run.dir again when it launches
    # DDP ranks) sees the same value.
    if not OmegaConf.has_resolver("uid"):
        OmegaConf.register_new_resolver("uid", lambda: secrets.token_hex(3), use_cache=True)
    # Only rank 0 writes the run's log file and .hydra/ folder; other ranks of a DDP/FSDP job get the null device /
    # no folder (hydra/default.yaml), so several processes never write the same files.
    if not OmegaConf.has_resolver("rank_zero_path"):
        OmegaConf.register_new_resolver("rank_zero_path", lambda path: path if is_rank_zero() else os.devnull)
    if not OmegaConf.has_resolver("rank_zero_only"):
        OmegaConf.register_new_resolver("rank_zero_only", lambda value: value if is_rank_zero() else None)


_register_resolvers()


def is_rank_zero() -> bool:
    """Rank as set by torchrun/SLURM/Lightning's launcher, known before any process group exists."""
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var]) == 0
    # Lightning's own launcher sets only the local rank (and the node rank on multi-node runs)
    return int(os.environ.get("LOCAL_RANK", 0)) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def run_job(job: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """Run a job; a user mistake (LitforgeError) ends it with its message and exit code 1, not a traceback.

    In a multirun the error is re-raised instead, so Hydra records the job as failed and the sweep goes on.
    """
    from omegaconf.errors import OmegaConfBaseException

    from litforge.parallel.launch import launched_ranks_cleaned_up

    quiet_library_chatter()
    try:
        if cfg.get("print_config", False) and is_rank_zero():
            print_config(cfg)
        with launched_ranks_cleaned_up():
            return job(cfg)
    except (LitforgeError, OmegaConfBaseException) as exc:
        if in_multirun():
            raise
        message = str(exc) if isinstance(exc, LitforgeError) else config_error_message(exc)
        log.error("%s", message)
        print(f"\nlitforge: error: {message}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 1))


def config_error_message(exc: Exception) -> str:
    """OmegaConf's errors carry the offending key; say which value to pass."""
    from omegaconf.errors import MissingMandatoryValue

    key = getattr(exc, "full_key", None)
    if isinstance(exc, MissingMandatoryValue) and key:
        return f"`{key}` has no value and is required: pass {key}=<value> on the command line"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"invalid config{f' at `{key}`' if key else ''}: {first}"


class _DropLines(logging.Filter):
    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet_library_chatter() -> None:
    """Drop Lightning's advertising tips and a deprecation warning it triggers inside torch: noise in every run."""
    import warnings

    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_DropLines("💡 Tip"))
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")


def print_config(cfg: DictConfig) -> None:
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree("config", guide_style="dim")
    for key, value in cfg.items():
        text = OmegaConf.to_yaml(value, resolve=True) if OmegaConf.is_config(value) else str(value)
        tree.add(f"[bold]{key}[/]").add(Syntax(text.rstrip(), "yaml", background_color="default"))
    Console().print(tree)


def print_summary(title: str, result: dict[str, Any]) -> None:
    """One screen at the end of a job: metrics, where things were written, how to look at them."""
    if not is_rank_zero():
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in result.get("metrics", {}).items():
        table.add_row(name, f"{value:.4f}" if isinstance(value, float) else str(value))
    console = Console()
    console.print(table)
    for label, key in (("best checkpoint", "best_checkpoint"), ("last checkpoint", "last_checkpoint"),
                       ("run folder", "output_dir"), ("written", "written")):
        if result.get(key):
            console.print(f"{label}: {result[key]}")
    if result.get("output_dir") and title.startswith("train"):
        console.print(f"view it: tensorboard --logdir {result['output_dir']} --host 127.0.0.1")


def prepare_command_line(config_name: str) -> None:
    """Before `@hydra.main`: value-type and log-folder checks, `resume=` → that run's folder (litforge.preflight)."""
    from pathlib import Path

    from litforge.preflight import prepare_command_line as prepare

    prepare(Path(sys.argv[0]).resolve().parent / "conf", config_name)
