"""Run-time facts every layer may ask for, known before any process group or Lightning object exists.

- :func:`is_rank_zero`: whether this process is the first rank (torchrun, SLURM and Lightning's launcher each say so
  in their own environment variable);
- :func:`in_multirun`: whether Hydra runs this job as part of a sweep (`-m`);
- the `${uid:}`, `${rank_zero_path:}` and `${rank_zero_only:}` resolvers the configs use, registered on import
  (with litforge.runtime.slurm's `${run_name:}` and `${slurm_gpus:}`, `${slurm_tasks:}`, `${slurm_cpus:}`).

Torch-free and Lightning-free: the CLI composes configs (and answers `--help`) with this module alone.
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from litforge.core.contracts import MeetsRarely
from litforge.runtime import slurm

if TYPE_CHECKING:
    import pytorch_lightning as pl


def is_rank_zero() -> bool:
    """Rank as set by torchrun/SLURM/Lightning's launcher, known before any process group exists."""
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var]) == 0
    # Lightning's own launcher sets only the local rank (and the node rank on multi-node runs)
    return int(os.environ.get("LOCAL_RANK", 0)) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0


def in_multirun() -> bool:
    """True inside a job of a Hydra sweep (`python train.py -m ...`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def register_resolvers() -> None:
    """The resolvers conf/ uses; idempotent, so every entry point and test may call it."""
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

    slurm.register_resolvers()  # one run folder per SLURM job; what hydra/launcher=slurm asks for


def decision_interval(trainer: pl.Trainer) -> int:
    """Optimizer steps between the ranks' collective decisions: 1, or a hogwild strategy's `decide_every`."""
    strategy = trainer.strategy
    return max(1, int(strategy.decide_every)) if isinstance(strategy, MeetsRarely) else 1


def meets_now(trainer: pl.Trainer) -> bool:
    """Whether the ranks may take a collective decision at this training step (callbacks ask before they do).

    Always True for synchronous strategies; under hogwild only every `strategy.decide_every` optimizer steps, the
    same steps on every rank (each rank counts its own), so the waits are rare and never mismatched."""
    every = decision_interval(trainer)
    return every <= 1 or trainer.global_step % every == 0


register_resolvers()
