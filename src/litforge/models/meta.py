"""Building a net on the meta device (shapes, no storage): the model side of meta-device init under sharding.

The training job opens :func:`meta_nets` around building the task when the strategy shards the net;
litforge.models.nets.build_net then builds under `torch.device("meta")`, and litforge.parallel.meta_init fills
each rank's shards after sharding (its docstring has the seed semantics). Kept here, below litforge.parallel, so the
net factory needs nothing from the layers above it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from litforge.core.errors import ConfigError

_ON_META: contextvars.ContextVar[bool] = contextvars.ContextVar("litforge_meta_nets", default=False)
RNG_ATTR = "_litforge_init_rng"  # the RNG state a net built on meta started from


@contextlib.contextmanager
def meta_nets(enabled: bool = True) -> Iterator[None]:
    """Within this block litforge.models.nets.build_net builds nets on the meta device (the train job opens
    it around `build_task` when the strategy shards): only the net, not the task's metrics or losses."""
    token = _ON_META.set(enabled)
    try:
        yield
    finally:
        _ON_META.reset(token)


def building_on_meta() -> bool:
    return _ON_META.get()


def build_on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` under `torch.device("meta")`, remembering the RNG state it started from (for
    litforge.parallel.meta_init.materialize)."""
    before = torch.random.get_rng_state()
    with torch.device("meta"):
        net = build()
    check_resettable(net)
    setattr(net, RNG_ATTR, before)
    return net


def is_meta(net: nn.Module) -> bool:
    return any(t.is_meta for t in own_tensors(net, recurse=True).values())


def own_tensors(module: nn.Module, recurse: bool = False) -> dict[str, Tensor]:
    return {**dict(module.named_parameters(recurse=recurse)), **dict(module.named_buffers(recurse=recurse))}


def check_resettable(net: nn.Module) -> None:
    """Refuse a net whose modules hold tensors of their own that nothing re-initialises after `to_empty`."""
    lacking = sorted(
        {
            type(m).__name__
            for m in net.modules()
            if own_tensors(m) and not callable(getattr(m, "reset_parameters", None))
        }
    )
    if lacking:
        raise ConfigError(
            f"strategy.meta_init=true builds the net on the meta device and initialises it after "
            f"sharding through each module's reset_parameters(), which {', '.join(lacking)} lack: "
            "give them one, or use strategy.meta_init=false (every rank builds the whole net first)"
        )
