"""Worker functions for in-process multi-rank tests (tests/gloo.py `start_ranks` forks them with gloo on CPU).

Kept free of Lightning and pytest imports: the module a rank unpickles its function from imports nothing the
forkserver has not.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _leave() -> None:
    """Every rank waits for the others before tearing gloo down: a rank that destroys its group while a peer still
    works (rank 0 saving the record) can abort that peer ("terminate called without an active exception", SIGABRT;
    seen once in CI on the 4-rank clipping probe, 2 cores)."""
    dist.barrier()
    dist.destroy_process_group()


def _tiny_gpt() -> Any:
    from litforge.models.gpt import GPT

    torch.manual_seed(0)
    return GPT(vocab_size=17, block_size=16, dim=32, depth=2, heads=2)


def _batch() -> torch.Tensor:
    return torch.randint(0, 17, (4, 17), generator=torch.Generator().manual_seed(1))


def _loss(net: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    logits = net(idx[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))


def fsdp_options(rank: int, world: int, port: int, out: str, variants: dict[str, tuple[dict[str, Any], str]]) -> None:
    """Per variant (fully_shard kwargs, activation checkpointing mode): loss, full gradients and what FSDP2 held.

    Under FSDP2 each rank trains on its half of one batch and FSDP2 averages the gradients, so they must equal the
    gradients of the whole batch in one process (`reference`, computed here on an unsharded copy). A variant with
    `{"tensor_parallel": True}` runs tensor parallelism instead (every rank on the whole batch).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing
    from litforge.parallel.plans import apply_fsdp, apply_tensor_parallel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    base, idx = _tiny_gpt(), _batch()
    reference = copy.deepcopy(base)
    _loss(reference, idx).backward()
    record: dict[str, Any] = {"reference": {n: p.grad for n, p in reference.named_parameters()}}
    mesh = init_device_mesh("cpu", (world,))
    local = idx.chunk(world)[rank]
    for name, (kwargs, ac_mode) in variants.items():
        net = copy.deepcopy(base)
        apply_activation_checkpointing(net, ac_mode)
        if kwargs.get("tensor_parallel"):  # every rank sees the whole batch; heads and MLP width split in two
            apply_tensor_parallel(net, mesh)
            batch = idx
        else:
            apply_fsdp(net, mesh, **kwargs)
            batch = local
        seen: dict[str, Any] = {}

        def note_dtype(module: torch.nn.Module, args: Any, seen: dict[str, Any] = seen) -> None:
            seen.setdefault("compute_dtype", str(module.weight.dtype))

        net.blocks[0].attn.q.register_forward_pre_hook(note_dtype)
        logits = net(batch[:, :-1])
        seen["output_dtype"] = str(logits.dtype)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        seen["sharded_after_forward"] = isinstance(net.blocks[0].attn.q.weight, DTensor)
        loss.backward()
        seen["grad_dtype"] = str(net.blocks[0].attn.q.weight.grad.dtype)
        seen["grads"] = {
            n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for n, p in net.named_parameters()
        }
        record[name] = seen
    if rank == 0:
        torch.save(record, Path(out) / "fsdp_options.pt")
    _leave()


def hsdp(rank: int, world: int, port: int, out: str) -> None:
    """HSDP over (2 replicas x 2 shards) through litforge's own `shard`: three SGD-momentum steps, each rank on its
    quarter of the batch, must end where one process ends on the whole batch (which is DDP's result); each rank holds
    half of every sharded parameter, and the two replicas of a shard hold the same values."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from litforge.parallel.plans import shard

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    base, idx = _tiny_gpt(), _batch()
    reference = copy.deepcopy(base)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    net = copy.deepcopy(base)
    mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    shard(net, mesh, {"reshard_after_forward": True, "replicate_size": 2})
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)  # not Adam: it
    # turns the key bias's zero gradient (softmax ignores it) into rounding noise divided by its own size
    local = idx.chunk(world)[rank]
    for _ in range(3):
        ref_opt.zero_grad()
        _loss(reference, idx).backward()
        ref_opt.step()
        opt.zero_grad()
        _loss(net, local).backward()
        opt.step()
    weight = net.blocks[0].attn.q.weight
    local_shard = weight.to_local()
    gathered = [torch.empty_like(local_shard) for _ in range(world)]
    dist.all_gather(gathered, local_shard.contiguous())
    record = {
        "mesh": tuple(weight.device_mesh.mesh.shape),
        "placements": [str(p) for p in weight.placements],
        "local_fraction": local_shard.numel() / weight.numel(),
        "replicas_equal": bool(torch.equal(gathered[0], gathered[2]) and torch.equal(gathered[1], gathered[3])),
        "shards_differ": not torch.equal(gathered[0], gathered[1]),
        "params": {n: p.full_tensor() if isinstance(p, DTensor) else p.detach() for n, p in net.named_parameters()},
        "reference": {n: p.detach() for n, p in reference.named_parameters()},
    }
    if rank == 0:
        torch.save(record, Path(out) / "hsdp.pt")
    _leave()


def clipping(rank: int, world: int, port: int, out: str, modes: dict[str, tuple[int, int]]) -> None:
    """Per mode (data-parallel size, tensor-parallel size): gradients after litforge's clip_grad_norm to 0.1 and the
    norm it saw, against torch's clip_grad_norm_ on an unsharded copy and the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from litforge.parallel.clipping import clip_grad_norm
    from litforge.parallel.plans import shard

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    base, idx = _tiny_gpt(), _batch()
    reference = copy.deepcopy(base)
    _loss(reference, idx).backward()
    record: dict[str, Any] = {
        "reference_norm": torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1),
        "reference": {n: p.grad for n, p in reference.named_parameters()},
    }
    for name, (dp, tp) in modes.items():
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("data_parallel", "tensor_parallel"))
        net = copy.deepcopy(base)
        shard(net, mesh)
        _loss(net, idx.chunk(dp)[mesh["data_parallel"].get_local_rank()]).backward()
        kinds = {type(p.grad).__name__ for p in net.parameters()}
        norm = clip_grad_norm(list(net.parameters()), 0.1)
        record[name] = {
            "norm": norm,
            "kinds": sorted(kinds),
            "grads": {
                n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for n, p in net.named_parameters()
            },
        }
    if rank == 0:
        torch.save(record, Path(out) / "clipping.pt")
    _leave()
