"""What a training run changes in its net before Lightning wraps or shards it: float8 matmuls (`float8=`),
activation checkpointing (`activation_checkpointing=`), `compile=` and `channels_last=`, applied in one place and in
torchtitan's order (float8, then activation checkpointing, then compile; sharding after all of them).

They are applied from Lightning's own hook for this, `configure_model` (called under the strategy, before it wraps
the module and before the optimizers exist): `LitforgeTask.configure_model` calls :func:`prepare_net` with the
:class:`NetOptions` the training job sets on the task, so reading the task tells what runs. A task of one's own that
does not subclass LitforgeTask declares `net_options: NetOptions = NetOptions()` (:class:`PreparesNet`) and calls
`prepare_net(self.net, self.net_options, ...)` from its own `configure_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import nn

from litforge.core.errors import ConfigError
from litforge.models.float8 import convert_to_float8
from litforge.models.speed import apply_speed_options
from litforge.parallel.activation_checkpointing import apply_activation_checkpointing


@dataclass(frozen=True)
class NetOptions:
    """The run's net options, typed as litforge.config.settings.Train reads them (nothing asked by default)."""

    float8: str = "none"  # none | tensorwise | rowwise (litforge.models.float8)
    float8_all_gather: bool = False  # FSDP2 gathers the weights in float8 (tensorwise scales, a sharded strategy)
    activation_checkpointing: str = "none"  # none | full | selective
    compile: bool | str | Mapping[str, object] = False  # true | blocks | torch.compile options
    channels_last: bool = False

    def asked(self) -> dict[str, str]:
        """The keys set to change the net, each with the value that switches it off."""
        switched = {
            "float8": (self.float8 != "none", "none"),
            "activation_checkpointing": (self.activation_checkpointing != "none", "none"),
            "compile": (bool(self.compile), "false"),
            "channels_last": (self.channels_last, "false"),
        }
        return {key: off for key, (on, off) in switched.items() if on}


@runtime_checkable
class PreparesNet(Protocol):
    """A task that takes the run's net options and applies them in its `configure_model` (LitforgeTask does)."""

    net_options: NetOptions


def prepare_net(net: nn.Module | None, options: NetOptions, owner: str) -> None:
    """Apply `options` to `net` in place (parameter names unchanged, so checkpoints stay interchangeable); `owner`:
    the task class, named where it keeps no net."""
    asked = options.asked()
    if not asked:
        return
    if net is None:
        offs = " ".join(f"{key}={off}" for key, off in asked.items())
        raise ConfigError(f"{', '.join(asked)} act on the task's `net`, and {owner} has none: set {offs}")
    if options.float8 != "none":
        convert_to_float8(net, options.float8, fsdp_all_gather=options.float8_all_gather)
    apply_activation_checkpointing(net, options.activation_checkpointing)
    apply_speed_options(net, compile=options.compile, channels_last=options.channels_last)
