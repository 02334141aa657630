"""Gradient clipping by the true global norm when some gradients are DTensors (fsdp, tp, fsdp_tp, hsdp).

Lightning's ModelParallelStrategy clips with `torch.nn.utils.clip_grad_norm_` over every parameter. That works when
all gradients are DTensors on one mesh (plain FSDP2), but fails under tensor parallelism, where the net mixes
DTensor gradients (the planned layers) with plain ones (embeddings, norms): "aten._foreach_norm.Scalar got mixed
torch.Tensor and DTensor"; and under fsdp_tp, where FSDP2's DTensors live on a 2-D mesh and the root's on the 1-D
data-parallel one: "All operands in aten.stack.default must have the same mesh". Upstream: pytorch/pytorch#180346
(clip_grad_norm_ across meshes, open) and meta-pytorch/torchtune#2420 (clipping under tensor parallelism); Lightning
passes the parameters to torch unchanged.

Here gradients are grouped by mesh (plain ones in a group of their own: they are equal on every rank), each group's
norm comes from torch's own `get_total_norm` (DTensor does the cross-rank reductions), the groups' norms combine
into the global one, and the clip coefficient scales each rank's local values in place.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.distributed.tensor import DTensor


def global_grad_norm(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all gradients together, as if the model were whole on one device (a plain 0-dim tensor).

    Gradients are grouped by device mesh; torch's public `get_total_norm` reduces each group (DTensor semantics do the
    cross-rank sums, `_StridedShard` layouts included), and the groups' norms are combined here.
    """
    groups: dict[object, list[torch.Tensor]] = {}
    for p in parameters:
        if p.grad is not None:
            groups.setdefault(p.grad.device_mesh if isinstance(p.grad, DTensor) else None, []).append(p.grad)
    squares = []
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
        squares.append(norm.float().pow(2))
    return torch.stack(squares).sum().sqrt() if squares else torch.zeros(())


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale all gradients so that their global norm is at most `max_norm` (torch's rule: coef = max/(norm+1e-6),
    capped at 1); returns the norm before clipping."""
    params = [p for p in parameters if p.grad is not None]
    norm = global_grad_norm(params)
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        grad = p.grad
        assert grad is not None  # params holds only the parameters with a gradient
        local = grad.to_local() if isinstance(grad, DTensor) else grad
        local.detach().mul_(coef.to(local.device, local.dtype))
    return norm


def has_dtensor_grads(parameters: Iterable[torch.Tensor]) -> bool:
    return any(isinstance(p.grad, DTensor) for p in parameters)
