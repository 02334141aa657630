"""Activation checkpointing (`activation_checkpointing=none|full|selective`), applied in one place, to the task's net.

A checkpointed unit keeps only its inputs from the forward pass and recomputes its inner activations during the
backward pass: peak activation memory drops to about one unit's worth plus the unit inputs, for one extra forward
of each checkpointed unit (benchmarks/memory.py measures both).

- `full`: every unit the net declares in `fsdp_units()` (the transformer blocks of the GPT and the ViT, the ResNet
  stages, the CNN blocks, the MLP layers): the same units FSDP2 gathers, so one unit's recompute needs only the
  weights FSDP has gathered for it anyway.
- `selective`: every other unit (the 1st, 3rd, ...), torchtitan's layer-selective mode with frequency 2: about half
  the saving for half the recompute.

How: :func:`litforge.runtime.compat.recompute_in_backward` makes each chosen unit's forward run through
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` on that instance (its docstring says why neither of
torch's `checkpoint_wrapper` nor its composable `checkpoint` is used yet). Parameter names, state dicts and
checkpoints are exactly those of an unwrapped net, so a run may switch the mode on resume. Apply it before sharding
(litforge.parallel.net_options does, from the task's `configure_model`): FSDP2's hooks then sit outside the recomputed
region, as in torchtitan.
"""

from __future__ import annotations

from torch import nn

from litforge.core.errors import ConfigError
from litforge.parallel.plans import sharding_units
from litforge.runtime.compat import recompute_in_backward

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


def apply_activation_checkpointing(net: nn.Module, mode: str) -> int:
    """Make the chosen units of `net` recompute their activations in the backward pass; returns how many."""
    units = checkpoint_units(net, mode)
    for unit in units:
        recompute_in_backward(unit)  # this instance only; names unchanged
    return len(units)
