"""Activation checkpointing (`activation_checkpointing=none|full|selective`), applied in one place, to the task's net.

A checkpointed unit keeps only its inputs from the forward pass and recomputes its inner activations during the
backward pass: peak activation memory drops to about one unit's worth plus the unit inputs, for one extra forward
of each checkpointed unit (benchmarks/memory.py measures both).

- `full`: every unit the net declares in `fsdp_units()` (the transformer blocks of the GPT and the ViT, the ResNet
  stages, the CNN blocks, the MLP layers): the same units FSDP2 gathers, so one unit's recompute needs only the
  weights FSDP has gathered for it anyway.
- `selective`: every other unit (the 1st, 3rd, ...), torchtitan's layer-selective mode with frequency 2: about half
  the saving for half the recompute.

How: each chosen unit's `forward` is replaced, on that instance only, by a call of the class's forward through
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` (the public, non-reentrant API, which works with
DDP, FSDP2 and DTensors). torch's `checkpoint_wrapper` lives in the private
`torch.distributed.algorithms._checkpoint` and wraps each unit in a new module, adding
`_checkpoint_wrapped_module.` to every parameter name: checkpoints would then differ from a run without it. Here
parameter names, state dicts and checkpoints are exactly those of an unwrapped net, so a run may switch the mode on
resume. Apply it before sharding (litforge.jobs.train does, before Lightning calls `configure_model`): FSDP2's hooks
then sit outside the recomputed region, as in torchtitan.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from litforge.core.errors import ConfigError
from litforge.parallel.plans import sharding_units

MODES = ("none", "full", "selective")


def checkpoint_units(net: nn.Module, mode: str) -> list[nn.Module]:
    """The units `mode` recomputes: all of the net's `fsdp_units()` (`full`) or every other one (`selective`)."""
    if mode not in MODES:
        raise ConfigError(
            f"activation_checkpointing={mode!r} is not one of {', '.join(MODES)}: e.g. activation_checkpointing=full"
        )
    if mode == "none":
        return []
    units = sharding_units(net)
    if not units:
        raise ConfigError(
            f"activation_checkpointing={mode} needs a net that declares its units in fsdp_units(); "
            f"{type(net).__name__} declares none: set activation_checkpointing=none"
        )
    return units if mode == "full" else units[::2]


def apply_activation_checkpointing(task: nn.Module, mode: str) -> int:
    """Make the chosen units of `task.net` recompute their activations in the backward pass; returns how many."""
    if mode == "none":
        return 0
    net = getattr(task, "net", None)
    if not isinstance(net, nn.Module):
        raise ConfigError(
            f"activation_checkpointing acts on the task's `net`, and {type(task).__name__} has none: "
            "set activation_checkpointing=none"
        )
    units = checkpoint_units(net, mode)
    for unit in units:
        if not is_checkpointed(unit):
            unit.forward = functools.partial(_recomputed_forward, unit)  # this instance only; names unchanged
    return len(units)


def is_checkpointed(unit: nn.Module) -> bool:
    return isinstance(vars(unit).get("forward"), functools.partial)


def _recomputed_forward(unit: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # type(unit).forward: the class's own forward (FSDP2 swaps the class for a subclass that inherits it); the RNG
    # state is restored for the recompute (preserve_rng_state), so dropout masks match the first pass
    return checkpoint(type(unit).forward, unit, *args, use_reentrant=False, **kwargs)
