"""Applying a net's own sharding facts to a device mesh: FSDP2 units and the tensor-parallel plan.

The facts live beside each model, as torchtitan keeps a model's parallel plan beside the model (the model contract:
litforge.core.contracts.Model and TensorParallelModel, docs/extending.md):

- `fsdp_units() -> list[nn.Module]`: each unit becomes one all-gather/reshard group, big enough to amortise the
  communication, small enough that only one unit's full weights are materialised at a time. A net that declares
  none is sharded as one unit.
- `tensor_parallel_plan() -> {submodule: "colwise" | "rowwise"}` (optional), with `check_tensor_parallel(tp_size)`
  to refuse sizes that do not divide: only nets that declare both run under tensor parallelism.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from litforge.core.contracts import TensorParallelModel, missing_members

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
from litforge.core.errors import ConfigError
from litforge.models.speed import sharding_units

TP_STYLES = ("colwise", "rowwise")


def apply_fsdp(net: nn.Module, mesh: DeviceMesh, **fsdp_kwargs: Any) -> int:
    """`fully_shard` every unit, then the net itself (the root gathers whatever is left: embeddings, head).

    `fsdp_kwargs` go to every `fully_shard` call (mp_policy, reshard_after_forward, offload_policy: the
    strategy's options, litforge.parallel.strategies.ModelParallel.fsdp_kwargs). Returns the number of units, so
    callers can tell a net that declared none (then the whole net is one unit).
    """
    units = sharding_units(net)
    for unit in units:
        fully_shard(unit, mesh=mesh, **fsdp_kwargs)
    root_kwargs = dict(fsdp_kwargs)
    if root_kwargs.get("mp_policy") is not None:  # units hand bf16 to each other; the task's loss gets fp32 outputs
        root_kwargs["mp_policy"] = dataclasses.replace(root_kwargs["mp_policy"], output_dtype=torch.float32)
    fully_shard(net, mesh=mesh, **root_kwargs)
    return len(units)


def tensor_parallel_plan(net: nn.Module) -> dict[str, str]:
    """The net's declared plan, checked: every entry names a Linear submodule and a known style."""
    if not isinstance(net, TensorParallelModel):
        missing = ", ".join(f"{m}()" for m in missing_members(net, TensorParallelModel))
        raise ConfigError(
            f"tensor parallelism needs a net that declares a tensor_parallel_plan() and "
            f"check_tensor_parallel() (model=vit, model=gpt); {type(net).__name__} lacks {missing}: use "
            "strategy=fsdp or strategy=ddp for this model"
        )
    plan = dict(net.tensor_parallel_plan())
    for name, style in plan.items():
        if style not in TP_STYLES or not isinstance(net.get_submodule(name), nn.Linear):
            raise ValueError(
                f"{type(net).__name__}.tensor_parallel_plan(): {name}={style!r} must name an nn.Linear "
                f"and one of {TP_STYLES}"
            )
    return plan


def apply_tensor_parallel(net: nn.Module, mesh: DeviceMesh) -> int:
    """Parallelise `net` over the 1-D tensor-parallel `mesh` by its own plan; returns the number of split layers."""
    plan = tensor_parallel_plan(net)
    # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
    net.check_tensor_parallel(mesh.size())  # type: ignore[operator]
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(net, mesh, {name: styles[style]() for name, style in plan.items()})
    return len(plan)


def hsdp_mesh(dp_mesh: DeviceMesh, replicate_size: int) -> DeviceMesh:
    """The 2-D `(replicate, shard)` mesh over the data-parallel ranks that makes `fully_shard` hybrid (HSDP).

    FSDP2 shards over the mesh's last dimension and all-reduces gradients over the first, so each group of
    world / replicate_size consecutive ranks holds one sharded copy (keep a group inside a node, where links are fast)
    and the copies meet once per step. Lightning's ModelParallelStrategy builds only a (data, tensor) mesh, so this
    one is built here, from the same ranks, when the task shards its net.
    """
    world = dp_mesh.size()
    if world % replicate_size:
        raise ConfigError(
            f"strategy.replicate_size={replicate_size} does not divide the {world} data-parallel ranks: "
            "use a divisor of trainer.devices x trainer.num_nodes"
        )
    return init_device_mesh(
        dp_mesh.device_type, (replicate_size, world // replicate_size), mesh_dim_names=("replicate", "shard")
    )


def shard(net: nn.Module, device_mesh: DeviceMesh, fsdp_kwargs: dict[str, Any] | None = None) -> None:
    """Apply the plan the mesh asks for: tensor parallel over `tensor_parallel` (>1), then FSDP2 over `data_parallel`
    (hybrid, over :func:`hsdp_mesh`, when `fsdp_kwargs` holds a `replicate_size` > 1).

    Tensor parallelism goes first: FSDP2 then shards the (already tensor-parallel) DTensors along the data-parallel
    dimension, which is how 2-D parallelism composes in PyTorch.
    """
    if getattr(net, "_litforge_sharded", False):  # Lightning calls configure_model again for test/predict
        return
    tp_mesh, dp_mesh = device_mesh["tensor_parallel"], device_mesh["data_parallel"]
    fsdp_kwargs = dict(fsdp_kwargs or {})
    replicate_size = fsdp_kwargs.pop("replicate_size", 1)
    if (
        dp_mesh.size() == 1
        and tp_mesh.size() > 1
        and (set(fsdp_kwargs) - {"reshard_after_forward"} or not fsdp_kwargs.get("reshard_after_forward", True))
    ):
        raise ConfigError(
            "strategy.mixed_precision, strategy.reshard_after_forward and strategy.offload act on FSDP2, "
            "which runs only over more than one data-parallel rank: use their defaults here, or "
            "strategy=fsdp with trainer.devices=2 or more"
        )
    if tp_mesh.size() > 1:
        apply_tensor_parallel(net, tp_mesh)
    if dp_mesh.size() > 1 or tp_mesh.size() == 1:  # one rank: FSDP2 over a 1-rank mesh (DTensor weights, so
        # Lightning's sharded save/load of the checkpoint, and trainer.test from it, work as with more ranks)
        apply_fsdp(net, hsdp_mesh(dp_mesh, replicate_size) if replicate_size > 1 else dp_mesh, **fsdp_kwargs)
    net._litforge_sharded = True  # type: ignore[assignment]  # a flag on the module, not a submodule
