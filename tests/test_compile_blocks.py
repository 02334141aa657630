"""`compile=blocks`: each transformer block, ResNet stage or MLP layer compiled on its own, trains like eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import TINY, read_metrics, run_cli, single_run
from litforge.core.errors import ConfigError
from litforge.models.gpt import GPT
from litforge.models.mlp import MLP
from litforge.models.resnet import ResNet
from litforge.models.speed import apply_speed_options
from litforge.models.vit import VisionTransformer
from litforge.parallel.activation_checkpointing import apply_activation_checkpointing
from litforge.runtime.flops import count_step_flops


@pytest.mark.parametrize(
    "make",
    [
        lambda: MLP(1, (8, 8), 10, hidden_dims=(16, 16)),
        lambda: GPT(vocab_size=32, block_size=8, dim=16, depth=3, heads=2),
        lambda: VisionTransformer(1, (8, 8), 10, patch_size=4, dim=16, depth=2, heads=2),
        lambda: ResNet(1, (16, 16), 10, depth=18),
    ],
    ids=["mlp", "gpt", "vit", "resnet"],
)
def test_blocks_compiles_each_unit_in_place_and_not_the_net(monkeypatch, make):
    compiled: list[nn.Module] = []
    real = nn.Module.compile
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: compiled.append(self) or real(self, **kw))
    net = make()
    names = list(net.state_dict())
    apply_speed_options(net, compile="blocks")
    assert compiled == net.fsdp_units() and len(compiled) >= 2
    assert net not in compiled
    assert list(net.state_dict()) == names  # checkpoints keep plain names: no `_orig_mod.`


def test_blocks_passes_compile_options_to_every_block(monkeypatch):
    seen: list[dict] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: seen.append(kw))
    net = GPT(vocab_size=32, block_size=8, dim=16, depth=2, heads=2)
    apply_speed_options(net, compile={"blocks": True, "backend": "eager"})
    assert seen == [{"recompile_limit": 8, "backend": "eager"}] * 2  # limit: one shape x grad modes, at least 8


def test_blocks_on_a_net_without_units_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"compile=blocks .* Sequential declares none: set compile=true"):
        apply_speed_options(nn.Sequential(nn.Linear(2, 2)), compile="blocks")


def test_blocks_compile_once_per_shape_and_grad_mode_and_never_fall_back_to_eager():
    # every in-place compiled module shares one dynamo frame: 3 Linear shapes x (training, no_grad, inference mode)
    # are 9 graphs, past torch's limit of 8, after which the last ones ran eagerly with a warning (`compile=blocks`
    # runs of the default MLP hit it at their test)
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=8):
        net, counter = MLP(1, (8, 8), 10, hidden_dims=(16, 32)), CompileCounter()
        apply_speed_options(net, compile={"blocks": True, "backend": counter})
        x = torch.randn(2, 1, 8, 8)
        for _ in range(2):  # the second round compiles nothing
            net(x).sum().backward()
            with torch.no_grad():
                net(x)
            with torch.inference_mode():
                net(x)
        assert counter.frame_count == 3 * 3


def train_losses(net: nn.Module, batches: list[tuple[torch.Tensor, ...]], forward, steps: int = 3) -> list[float]:
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        loss = forward(net, *batches[step % len(batches)])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def gpt_loss(net: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(net(idx, None).flatten(0, 1), targets.flatten())


def image_loss(net: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(net(images), labels)


@pytest.mark.slow  # inductor's CPU code generation: ~30 s on 2 cores
def test_gpt_blocks_under_activation_checkpointing_train_like_eager():
    def make() -> nn.Module:
        torch.manual_seed(0)
        return GPT(vocab_size=32, block_size=16, dim=32, depth=2, heads=2)

    batches = [(torch.randint(0, 32, (2, 16)), torch.randint(0, 32, (2, 16))) for _ in range(2)]
    eager = train_losses(make(), batches, gpt_loss)
    task = nn.Module()
    task.net = make()
    assert apply_activation_checkpointing(task.net, "full") == 2
    apply_speed_options(task.net, compile="blocks")
    blocks = train_losses(task.net, batches, gpt_loss)
    assert blocks == pytest.approx(eager, rel=1e-5)
    # the FLOP count runs the compiled blocks eagerly: same count as an uncompiled net, nothing recompiled
    idx, plain = batches[0][0], make()
    assert count_step_flops(task.net, lambda: task.net(idx, None)) == count_step_flops(plain, lambda: plain(idx, None))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "shape", "backend"),
    [
        (lambda: MLP(1, (8, 8), 10, hidden_dims=(32, 32), dropout=0.0), (1, 8, 8), "inductor"),
        # aot_eager: the same forward/backward graphs per stage as inductor, without minutes of conv codegen
        (lambda: ResNet(1, (16, 16), 10, depth=18), (1, 16, 16), "aot_eager"),
    ],
    ids=["mlp", "resnet"],
)
def test_mlp_and_resnet_blocks_train_like_eager(make, shape, backend):
    def fresh() -> nn.Module:
        torch.manual_seed(0)
        return make()

    torch.manual_seed(1)
    batches = [(torch.randn(4, *shape), torch.randint(0, 10, (4,))) for _ in range(2)]
    eager = train_losses(fresh(), batches, image_loss)
    task = nn.Module()
    task.net = fresh()
    apply_speed_options(task.net, compile={"blocks": True, "backend": backend})
    assert train_losses(task.net, batches, image_loss) == pytest.approx(eager, rel=1e-4)


@pytest.mark.slow
def test_compile_blocks_from_the_command_line_trains_and_counts_flops(tmp_path: Path):
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *TINY, "compile={blocks:true,backend:eager}", log_dir=log_dir)
    assert result.returncode == 0, result.output[-3000:]
    metrics = read_metrics(single_run(log_dir))["metrics"]
    assert metrics["test/acc"] > 0.5
    assert metrics["perf/flops_per_step"] == 64 * (2 * 2 * 64 * 256 + 3 * 2 * (256 * 256 + 256 * 10))
    # quiet: the model summary counts FLOPs eagerly, no graph is traced of compiled code, no shape falls back to eager
    for noise in ("Total FLOPs: 0", "Error occurs, No graph saved", "recompile_limit"):
        assert noise not in result.output, noise
    bad = run_cli("train.py", *TINY, "compile=block", log_dir=tmp_path / "bad")
    assert bad.returncode != 0
    assert "litforge: error" in bad.stderr and "blocks" in bad.stderr and "Traceback" not in bad.output
