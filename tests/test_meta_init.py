"""Meta-device init under sharding (litforge.parallel.meta_init) on 2 gloo ranks: each rank's start-up memory is
~1/N of the net plus one module, the values equal an unsharded build with the same seed, and training then matches
an unsharded run step for step."""

from __future__ import annotations

import weakref
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

GPT_KW = dict(vocab_size=17, block_size=16, dim=32, depth=4, heads=2)


class LiveBytes(TorchDispatchMode):
    """Peak bytes of non-meta tensor storage alive at once among the storages allocated while the mode is on (each
    new storage counted when an op returns it, released when Python frees it)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self.seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            # a DTensor is a wrapper: its storage is the local tensor's, counted when that one appears
            if isinstance(tensor, torch.Tensor) and not tensor.is_meta and not is_traceable_wrapper_subclass(tensor):
                storage = tensor.untyped_storage()
                key = id(storage)
                if key not in self.seen and storage.nbytes():
                    self.seen.add(key)
                    self.live += storage.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._free, key, storage.nbytes())
        return out


def _loss(net: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    logits = net(idx[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))


def meta_probe(rank: int, world: int) -> dict[str, Any]:
    """Build a GPT on meta, shard it over all ranks (FSDP2), materialise; then 3 SGD steps on this rank's half of
    the batch, against one unsharded process on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh

    from litforge.models.gpt import GPT
    from litforge.parallel.meta_init import build_on_meta, materialize, shard_like
    from litforge.parallel.plans import shard

    torch.manual_seed(0)
    reference = GPT(**GPT_KW)
    whole = sum(p.numel() * p.element_size() for p in reference.parameters())
    largest_module = max(
        sum(p.numel() * p.element_size() for p in m.parameters(recurse=False)) for m in reference.modules()
    )
    mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
    torch.manual_seed(0)
    with LiveBytes() as counter:
        net = build_on_meta(lambda: GPT(**GPT_KW))
        shard(net, mesh)
        materialize(net, "cpu")
    local = {
        t.to_local().untyped_storage().data_ptr(): t.to_local().untyped_storage().nbytes() for t in net.parameters()
    }
    equal_init = all(
        torch.equal(p.full_tensor(), q) for p, q in zip(net.parameters(), reference.parameters(), strict=True)
    )
    torch.manual_seed(1)  # starting weights (task.init_from) load into another seed's sharded net after meta init
    other = build_on_meta(lambda: GPT(**GPT_KW))
    shard(other, mesh)
    materialize(other, "cpu")
    other.load_state_dict(shard_like(other, reference.state_dict()))
    loaded = all(
        torch.equal(p.full_tensor(), q) for p, q in zip(other.parameters(), reference.parameters(), strict=True)
    )
    idx = torch.randint(0, 17, (4, 17), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(net.parameters(), lr=0.3)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.3)
    losses = []
    for _ in range(3):
        for model, optimizer, batch in ((net, opt, idx.chunk(world)[rank]), (reference, ref_opt, idx)):
            optimizer.zero_grad()
            loss = _loss(model, batch)
            loss.backward()
            optimizer.step()
        losses.append(float(_loss(reference, idx).detach()))
    max_diff = max(
        float((p.full_tensor() - q).detach().abs().max())
        for p, q in zip(net.parameters(), reference.parameters(), strict=True)
    )
    return {
        "whole": whole,
        "largest_module": largest_module,
        "peak": counter.peak,
        "local": sum(local.values()),
        "equal_init": equal_init,
        "loaded": loaded,
        "max_diff": max_diff,
        "losses": losses,
    }


@pytest.fixture(scope="module")
def probe(ranks: Any) -> list[dict[str, Any]]:
    return ranks.run(meta_probe, timeout=60)


def test_each_rank_holds_a_shard_and_never_the_whole_net(probe: list[dict[str, Any]]) -> None:
    """Parameter storage after init is ~1/2 of the net's bytes; the peak of everything allocated while building,
    sharding and initialising stays under 1/2 + 1.5 x the largest module's parameters (the stated overhead: that
    module's full-size stand-ins during its init, and the copy of this rank's slice) + 8 KiB: far below the whole
    net, which was never allocated."""
    for record in probe:
        whole = record["whole"]
        assert abs(record["local"] - whole / 2) <= 0.02 * whole, record
        assert record["peak"] <= whole / 2 + 1.5 * record["largest_module"] + 8192, record
        assert record["peak"] < 0.75 * whole, record


def test_values_equal_an_unsharded_build_and_training_matches(probe: list[dict[str, Any]]) -> None:
    """Same seed, same values as `GPT(...)` built whole (its own N(0, 0.02) init included); three SGD steps over
    2 ranks then end where one process ends on the whole batch, and the loss falls. Full weights of another run
    (task.init_from) load into a meta-initialised sharded net."""
    for record in probe:
        assert record["equal_init"], record
        assert record["loaded"], record
        assert record["max_diff"] < 1e-5, record
        assert record["losses"][-1] < record["losses"][0], record


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


def pipeline_probe(rank: int, world: int) -> dict[str, Any]:
    """strategy=pipeline's start: the GPT built on meta, cut into one stage per rank, and only this rank's stage
    given storage and values (litforge.parallel.meta_init.materialize with `keep`), against a whole build."""
    from litforge.models.gpt import GPT
    from litforge.parallel.meta_init import build_on_meta, materialize
    from litforge.parallel.pipeline_split import split_net

    torch.manual_seed(0)
    reference = GPT(**GPT_KW)
    part = split_net(reference, world)[rank]
    expected = _bytes([*part.parameters(), *part.buffers()])
    torch.manual_seed(0)
    with LiveBytes() as counter:
        net = build_on_meta(lambda: GPT(**GPT_KW))
        stage = split_net(net, world)[rank]
        materialize(net, "cpu", keep=[*stage.parameters(), *stage.buffers()])
    values = dict(reference.named_parameters(remove_duplicate=False))
    mine = {id(t) for t in stage.parameters()}
    return {
        "whole": _bytes(reference.parameters()),
        "largest_module": max(_bytes(m.parameters(recurse=False)) for m in reference.modules()),
        "stage": expected,
        "peak": counter.peak,
        "held": _bytes(t for t in (*net.parameters(), *net.buffers()) if not t.is_meta),
        "held_is_the_stage": all((id(p) in mine) != p.is_meta for p in net.parameters()),
        "equal_init": all(torch.equal(p, values[n]) for n, p in net.named_parameters() if not p.is_meta),
        "tied": net.head.weight is net.tok_embed.weight,
    }


def test_pipeline_ranks_build_only_their_own_stages(ranks: Any) -> None:
    """Each pipeline rank's start-up memory is its stage's bytes (plus one module's transient stand-ins), not the
    whole net's; the other stages stay on meta; the values are a whole build's with the same seed (so
    strategy=pipeline trains as one process: tests/test_pipeline.py's CLI runs build this way by default)."""
    for record in ranks.run(pipeline_probe, timeout=60):
        assert record["held"] == record["stage"] and record["held_is_the_stage"], record
        assert record["stage"] < 0.75 * record["whole"], record
        assert record["peak"] <= record["stage"] + 1.5 * record["largest_module"] + 8192, record
        assert record["peak"] < 0.85 * record["whole"], record
        assert record["equal_init"] and record["tied"], record


def test_a_module_without_reset_parameters_is_refused() -> None:
    from torch import nn

    from litforge.core.errors import ConfigError
    from litforge.parallel.meta_init import build_on_meta

    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gain = nn.Parameter(torch.ones(3))

    with pytest.raises(ConfigError, match="strategy.meta_init=false.*|Scale"):
        build_on_meta(Scale)


def test_sharding_strategies_build_on_meta_unless_switched_off(compose_cfg: Any) -> None:
    """strategy=fsdp/tp/fsdp_tp/hsdp/pipeline build the net on meta; strategy.meta_init=false, ddp and the default
    do not."""
    from litforge.models.meta import is_meta, meta_nets
    from litforge.models.nets import build_net
    from litforge.parallel.meta_init import wants_meta_init

    for strategy in ("fsdp", "tp", "fsdp_tp", "hsdp", "pipeline"):
        assert wants_meta_init(compose_cfg(f"strategy={strategy}").strategy), strategy
    assert not wants_meta_init(compose_cfg("strategy=fsdp", "strategy.meta_init=false").strategy)
    assert not wants_meta_init(compose_cfg("strategy=pipeline", "strategy.meta_init=false").strategy)
    assert not wants_meta_init(compose_cfg("strategy=ddp").strategy)
    assert not wants_meta_init(compose_cfg().strategy)
    cfg = {"_target_": "litforge.models.gpt.GPT", "_partial_": True, "dim": 8, "depth": 1, "heads": 2}
    with meta_nets():
        assert is_meta(build_net(cfg, vocab_size=5, block_size=4))
    assert not is_meta(build_net(cfg, vocab_size=5, block_size=4))
