"""Where to cut a net for FSDP2 and tensor parallelism, and applying the cuts to a device mesh.

A net declares its FSDP units with a `fsdp_units()` method (each unit becomes one all-gather/reshard group: big
enough to amortise the communication, small enough that only one unit's full weights are materialised at a time).
Transformer nets that keep their blocks in `self.blocks` need not declare anything.

The tensor-parallel plan is keyed on module names, not classes, so it fits any transformer whose blocks name their
projections `attn.q/k/v/proj` and `mlp.fc1/fc2` (the ViT here, and any GPT-style decoder with the same layout):
q/k/v and fc1 are split by output columns, proj and fc2 by input rows, so each block needs one all-reduce after
attention and one after the MLP (Megatron-LM, Shoeybi et al. 2019).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from litforge.errors import ConfigError

COLWISE = ("attn.q", "attn.k", "attn.v", "mlp.fc1")
ROWWISE = ("attn.proj", "mlp.fc2")


def sharding_units(net: nn.Module) -> list[nn.Module]:
    """The modules to wrap with `fully_shard` before the root: the net's own `fsdp_units()`, else its `blocks`."""
    declared = getattr(net, "fsdp_units", None)
    if callable(declared):
        units = list(declared())
    elif isinstance(getattr(net, "blocks", None), nn.ModuleList):
        units = list(net.blocks)
    else:
        units = []
    return [unit for unit in units if any(True for _ in unit.parameters())]


def apply_fsdp(net: nn.Module, mesh: Any) -> int:
    """`fully_shard` every unit, then the net itself (the root gathers whatever is left: embeddings, head).

    Returns the number of units, so callers can tell a net that declared none (then the whole net is one unit).
    """
    from torch.distributed.fsdp import fully_shard

    units = sharding_units(net)
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return len(units)


def transformer_blocks(net: nn.Module) -> list[nn.Module]:
    """The blocks a tensor-parallel plan applies to: entries of `net.blocks` that have the projection names."""
    blocks = getattr(net, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        return []
    return [block for block in blocks if all(_has(block, name) for name in COLWISE + ROWWISE)]


def check_divisible(block: nn.Module, tp_size: int) -> None:
    """Heads and MLP width must split evenly over the tensor-parallel ranks, or shards would differ in shape."""
    q: nn.Linear = block.get_submodule("attn.q")
    fc1: nn.Linear = block.get_submodule("mlp.fc1")
    head_dim = getattr(block.get_submodule("attn"), "head_dim", None)
    heads = q.out_features // head_dim if head_dim else q.out_features
    if heads % tp_size or fc1.out_features % tp_size:
        raise ConfigError(
            f"tensor parallelism over {tp_size} ranks needs the number of heads ({heads}) and the MLP width "
            f"({fc1.out_features}) to be divisible by {tp_size}: change model.heads / model.mlp_ratio or "
            f"strategy.tensor_parallel_size"
        )


def apply_tensor_parallel(net: nn.Module, mesh: Any) -> int:
    """Parallelise every transformer block of `net` over the 1-D tensor-parallel `mesh`; returns the block count."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    blocks = transformer_blocks(net)
    if not blocks:
        raise ConfigError(
            f"tensor parallelism needs a transformer net with `self.blocks` whose blocks have {', '.join(COLWISE + ROWWISE)} "
            f"(e.g. model=vit); {type(net).__name__} has none: use strategy=fsdp or strategy=ddp for this model"
        )
    plan = {name: ColwiseParallel() for name in COLWISE} | {name: RowwiseParallel() for name in ROWWISE}
    for block in blocks:
        check_divisible(block, mesh.size())
        parallelize_module(block, mesh, plan)
    return len(blocks)


def shard(net: nn.Module, device_mesh: Any) -> None:
    """Apply the plan the mesh asks for: tensor parallel over `tensor_parallel` (>1), then FSDP2 over `data_parallel`.

    Tensor parallelism goes first: FSDP2 then shards the (already tensor-parallel) DTensors along the data-parallel
    dimension, which is how 2-D parallelism composes in PyTorch.
    """
    if getattr(net, "_litforge_sharded", False):  # Lightning calls configure_model again for test/predict
        return
    tp_mesh, dp_mesh = device_mesh["tensor_parallel"], device_mesh["data_parallel"]
    if tp_mesh.size() > 1:
        apply_tensor_parallel(net, tp_mesh)
    if dp_mesh.size() > 1:
        apply_fsdp(net, dp_mesh)
    net._litforge_sharded = True


def local_numel(module: nn.Module) -> tuple[int, int]:
    """(elements this rank holds, elements of the whole model): what sharding saves per rank."""
    local = total = 0
    for param in module.parameters():
        total += param.numel()
        local += param.to_local().numel() if hasattr(param, "to_local") else param.numel()
    return local, total


def _has(module: nn.Module, name: str) -> bool:
    try:
        return isinstance(module.get_submodule(name), nn.Linear)
    except AttributeError:
        return False
