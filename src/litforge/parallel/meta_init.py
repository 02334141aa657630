"""Meta-device init under sharding (strategy=fsdp, tp, fsdp_tp, hsdp): no rank ever holds the whole net.

The net is built under `torch.device("meta")` (shapes only, no storage), sharded by litforge.parallel.plans.shard,
then materialised on each rank's device (`to_empty`) and initialised *shard by shard*:

- Seed semantics: the values equal an unsharded run's with the same seed. The global RNG state at the start of
  the net's construction is kept (:func:`build_on_meta`); :func:`materialize` restores it and replays the
  construction's initialisation in order, for one module at a time: pass 1 each module's own `reset_parameters()`
  (children before the root, as constructors build them), pass 2 the net's own `init_weights(module)` over
  `net.modules()` (what `self.apply(self.init_weights)` did at the end of its constructor). Each module's full
  tensors exist only while its init runs, each rank keeps its own slice (the stated overhead: 1.5 x the largest
  module's own parameter bytes, its full stand-ins plus the copy of the slice; tests/test_meta_init.py). The RNG state
  is put back afterwards, so no later draw shifts.
- Why not Lightning's own path (`trainer.init_module(empty_init=True)`, then `_materialize_distributed_module` in
  `ModelParallelStrategy.setup`): it calls `reset_parameters()` on the local shards, so a net's own init (the
  GPT's N(0, 0.02)) is lost, values depend on the mesh, and with CPU meshes DTensor's random ops draw the *same*
  numbers on every rank (identical shards); and it would put the task's torchmetrics states on the meta device
  too (Lightning's own TODO in `lightning_fabric.utilities.init`). Here only the net goes to meta.

A net must give every module that holds parameters or buffers of its own a `reset_parameters()` (torch's layers
have one; ViT has one for its tokens) or it is refused with one line (`strategy.meta_init=false` builds it whole).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Protocol, runtime_checkable

import torch
from hydra.utils import get_class
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, distribute_tensor

from litforge.models.meta import RNG_ATTR, build_on_meta, building_on_meta, is_meta, meta_nets
from litforge.models.meta import own_tensors as _own_tensors
from litforge.parallel.strategies import BuildsOnMeta

__all__ = ["build_on_meta", "building_on_meta", "is_meta", "materialize", "meta_nets", "shard_like", "wants_meta_init"]


def wants_meta_init(strategy_cfg: DictConfig) -> bool:
    """Whether the `strategy=` config shards the net with litforge's ModelParallel, or cuts it into pipeline stages
    (litforge.parallel.pipeline.Pipeline: each rank builds only its stages), and keeps `meta_init` on (the key
    their YAMLs declare; a config without it takes the classes' default, on)."""
    if "_target_" not in strategy_cfg or ("meta_init" in strategy_cfg and not strategy_cfg.meta_init):
        return False
    try:
        return issubclass(get_class(str(strategy_cfg._target_)), BuildsOnMeta)
    except Exception:  # an unimportable target is reported where the strategy is built
        return False


@runtime_checkable
class InitsWeights(Protocol):
    """A net with an init of its own over its modules, run last by its constructor (`self.apply(self.init_weights)`:
    the GPT's N(0, 0.02))."""

    def init_weights(self, module: nn.Module) -> None: ...


def _local_slice(full: Tensor, like: Tensor) -> Tensor:
    """This rank's part of `full`, placed as the (possibly DTensor) tensor `like` is: a local slice, no comms."""
    if isinstance(like, DTensor):
        return distribute_tensor(full, like.device_mesh, like.placements, src_data_rank=None).to_local()
    return full


Init = Callable[[nn.Module], None]


def _stand_ins(module: nn.Module) -> dict[str, Tensor]:
    """Full-size, uninitialised CPU tensors shaped like the module's own parameters and buffers."""
    out: dict[str, Tensor] = {}
    for name, tensor in _own_tensors(module).items():
        full = torch.empty(tensor.shape, dtype=tensor.dtype)
        out[name] = nn.Parameter(full, requires_grad=tensor.requires_grad) if isinstance(tensor, nn.Parameter) else full
    return out


@contextlib.contextmanager
def _swapped(module: nn.Module, stand_ins: dict[str, Tensor]) -> Iterator[None]:
    """The module's own tensors replaced by `stand_ins` for the duration (its init then fills those)."""
    real = _own_tensors(module)
    try:
        for name, stand_in in stand_ins.items():
            setattr(module, name, stand_in)  # nn.Module keeps a parameter a parameter, a buffer a buffer
        with torch.no_grad():
            yield
    finally:
        for name, tensor in real.items():
            setattr(module, name, tensor)


def _run(module: nn.Module, steps: list[tuple[Tensor, Init]]) -> dict[str, Tensor]:
    """The module's full initial tensors: each (RNG state, init) step in order, on one set of stand-ins."""
    stand_ins = _stand_ins(module)
    with _swapped(module, stand_ins):
        for state, init in steps:
            torch.random.set_rng_state(state)
            init(module)
    return stand_ins


def _reset(module: nn.Module) -> None:
    # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
    module.reset_parameters()  # type: ignore[operator]


def materialize(net: nn.Module, device: torch.device | str, keep: Collection[Tensor] | None = None) -> None:
    """Give a (sharded) meta net storage on `device`, each rank only its own shards, and initialise it so that
    the values equal an unsharded build with the same seed (see the module docstring).

    `keep` (strategy=pipeline: the tensors of this rank's stages): only those get storage and values; every other
    tensor of the net stays on meta (shapes only), so the rank never holds the stages it does not run.

    Two walks, in the construction's order: the first only *times* the draws (each module's init runs on
    throw-away stand-ins, to learn the RNG state each init starts from); the second builds one module's full
    tensors at a time from those states (its reset, then the net's own init on top) and keeps this rank's slice.
    """
    if not is_meta(net):
        return
    before = getattr(net, RNG_ATTR, torch.random.get_rng_state())
    kept: set[nn.Module] | None = None
    if keep is None:
        net.to_empty(device=device)
    else:
        ids = {id(t) for t in keep}
        kept = {m for m in net.modules() if any(id(t) in ids for t in _own_tensors(m).values())}
        _to_empty_part(net, device, ids)
    resume_state = torch.random.get_rng_state()
    modules = [m for m in net.modules() if m is not net] + [net]  # constructors build children first
    steps: dict[nn.Module, list[tuple[Tensor, Init]]] = {m: [] for m in modules}
    try:
        torch.random.set_rng_state(before)
        walks: list[tuple[list[nn.Module], Init]] = [(modules, _reset)]
        if isinstance(net, InitsWeights):
            walks.append((list(net.modules()), net.init_weights))  # what `self.apply(self.init_weights)` did last
        for walk, init in walks:
            for module in walk:
                if _own_tensors(module):
                    state = torch.random.get_rng_state()
                    steps[module].append((state, init))
                    with _swapped(module, _stand_ins(module)):
                        init(module)
        for module in modules:
            if steps[module] and (kept is None or module in kept):
                full = _run(module, steps[module])
                with torch.no_grad():
                    for name, tensor in _own_tensors(module).items():
                        if tensor.is_meta:  # another pipeline rank's (keep)
                            continue
                        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
                        local.copy_(_local_slice(full[name].detach(), tensor))
                del full
    finally:
        torch.random.set_rng_state(resume_state)  # the replay shifts no later draw


def _to_empty_part(net: nn.Module, device: torch.device | str, ids: set[int]) -> None:
    """`to_empty` for the tensors whose ids are in `ids` only: each gets one uninitialised tensor on `device`, set on
    every module that holds it (a tied weight stays tied)."""
    new: dict[int, Tensor] = {}
    for module in net.modules():
        for name, tensor in _own_tensors(module).items():
            if id(tensor) in ids:
                if id(tensor) not in new:
                    empty = torch.empty_like(tensor, device=device)
                    is_param = isinstance(tensor, nn.Parameter)
                    new[id(tensor)] = nn.Parameter(empty, requires_grad=tensor.requires_grad) if is_param else empty
                setattr(module, name, new[id(tensor)])


def shard_like(net: nn.Module, weights: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Full tensors (another run's state_dict) as slices placed like the net's sharded ones, ready for
    `load_state_dict` (task.init_from after meta init); tensors whose shape differs are returned as they are."""
    own = net.state_dict()
    out: dict[str, Tensor] = {}
    for key, tensor in weights.items():
        like = own.get(key)
        if isinstance(like, DTensor) and tuple(tensor.shape) == tuple(like.shape):
            out[key] = distribute_tensor(tensor.to(like.dtype), like.device_mesh, like.placements, src_data_rank=None)
        else:
            out[key] = tensor
    return out
