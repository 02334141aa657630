"""Every net builds from any datamodule shape, predicts (batch, num_classes), and trains end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from litforge.core.errors import ConfigError
from litforge.models import transfer
from litforge.models.cnn import CNN
from litforge.models.mlp import MLP
from litforge.models.resnet import ResNet, weights_cache_path
from litforge.models.vit import VisionTransformer

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
NETS: dict[str, Callable[..., nn.Module]] = {
    "mlp": lambda c, hw, n: MLP(c, hw, n, hidden_dims=(32, 16)),
    "cnn": lambda c, hw, n: CNN(c, hw, n, channels=(8, 16, 32)),
    "resnet18": lambda c, hw, n: ResNet(c, hw, n, depth=18),
    "resnet50": lambda c, hw, n: ResNet(c, hw, n, depth=50),
    "vit": lambda c, hw, n: VisionTransformer(c, hw, n, patch_size=4, dim=32, depth=2, heads=4),
}
# k's bias adds the same score to every key of a query, which softmax cancels: its gradient is exactly zero
ZERO_GRAD_OK = ("attn.k.bias",)


def check_trains(net: nn.Module, shape: tuple[int, int, int], num_classes: int, batch: int = 2) -> None:
    torch.manual_seed(0)
    out = net(torch.randn(batch, *shape))
    assert out.shape == (batch, num_classes)
    out.square().sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None, f"no gradient reaches {name}"
        assert torch.isfinite(p.grad).all(), name
        if not name.endswith(ZERO_GRAD_OK):
            assert p.grad.abs().sum() > 0, f"zero gradient at {name}"


@pytest.mark.parametrize("num_classes", [10, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(NETS))
def test_net_output_and_gradients(name: str, shape: tuple[int, int, int], num_classes: int) -> None:
    torch.manual_seed(0)
    net = NETS[name](shape[0], shape[1:], num_classes)
    check_trains(net, shape, num_classes)


def test_cnn_and_mlp_larger_rgb_input() -> None:
    torch.manual_seed(0)
    check_trains(CNN(3, (64, 64), 10), (3, 64, 64), 10)
    check_trains(MLP(3, (64, 64), 10), (3, 64, 64), 10)


def test_resnet_grey_input_and_stem_choice() -> None:
    small = ResNet(1, (32, 32), 10)
    assert small.net.conv1.in_channels == 1 and small.net.conv1.stride == (1, 1)
    assert isinstance(small.net.maxpool, nn.Identity)
    imagenet = ResNet(1, (64, 64), 10)  # auto: large enough for the ImageNet stem
    assert imagenet.net.conv1.in_channels == 1 and imagenet.net.conv1.stride == (2, 2)
    assert isinstance(imagenet.net.maxpool, nn.MaxPool2d)
    check_trains(ResNet(1, (32, 32), 10, small_input=False), (1, 32, 32), 10)


def test_resnet_head_split() -> None:
    net = ResNet(3, (32, 32), 5)
    head = list(net.head_parameters())
    assert head == [net.net.fc.weight, net.net.fc.bias]
    transfer.backbone(net).requires_grad_(False)  # what callbacks=finetune freezes first
    net(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is not None for p in head)
    assert all(p.grad is None for p in net.parameters() if not any(p is h for h in head))


def test_resnet_bad_depth() -> None:
    with pytest.raises(ConfigError, match=r"depth=20.*\[18, 34, 50\]"):
        ResNet(3, (32, 32), 10, depth=20)


def test_vit_patch_size_must_divide_image() -> None:
    with pytest.raises(ConfigError, match="patch_size") as err:
        VisionTransformer(1, (8, 8), 10, patch_size=3)
    assert "8x8" in str(err.value) and "model.patch_size=4" in str(err.value)


def test_vit_dim_must_divide_heads() -> None:
    with pytest.raises(ConfigError, match="heads"):
        VisionTransformer(1, (8, 8), 10, dim=30, heads=4)


def test_vit_layout_for_parallelism() -> None:
    vit = VisionTransformer(3, (32, 32), 10, dim=32, depth=3, heads=4)
    assert isinstance(vit.blocks, nn.ModuleList) and len(vit.blocks) == 3
    names = {n for n, _ in vit.named_modules()}
    for sub in ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2"):
        assert f"blocks.0.{sub}" in names
    assert vit.blocks[0].attn.head_dim == 8


def test_vit_attention_runs_on_a_head_shard() -> None:
    """Column-sharding q/k/v to half the heads (as tensor parallelism does) must still run: heads come from q."""
    attn = VisionTransformer(1, (8, 8), 10, dim=32, heads=4).blocks[0].attn
    for lin in (attn.q, attn.k, attn.v):
        lin.weight.data, lin.bias.data = lin.weight.data[:16], lin.bias.data[:16]
    attn.proj.weight.data = attn.proj.weight.data[:, :16]
    assert attn(torch.randn(2, 5, 32)).shape == (2, 5, 32)


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty torch.hub cache and no network, whatever machine the tests run on."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))

    def no_network(url: str, *args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    return tmp_path / "hub"


def test_resnet_pretrained_offline_then_cached(offline_hub: Path) -> None:
    expected = offline_hub / "checkpoints" / "resnet18-f37072fd.pth"
    assert weights_cache_path(torchvision.models.ResNet18_Weights.DEFAULT) == str(expected)
    with pytest.raises(ConfigError) as err:
        ResNet(3, (32, 32), 10, pretrained=True)
    assert str(expected) in str(err.value) and "model.pretrained=false" in str(err.value)

    torch.manual_seed(0)
    saved = torchvision.models.resnet18().state_dict()
    expected.parent.mkdir(parents=True, exist_ok=True)
    torch.save(saved, expected)

    rgb = ResNet(3, (64, 64), 10, pretrained=True)
    assert torch.equal(rgb.net.layer1[0].conv1.weight, saved["layer1.0.conv1.weight"])
    assert torch.equal(rgb.net.conv1.weight, saved["conv1.weight"])
    assert rgb.net.fc.out_features == 10

    grey = ResNet(1, (64, 64), 10, pretrained=True)
    torch.testing.assert_close(grey.net.conv1.weight, saved["conv1.weight"].sum(dim=1, keepdim=True))
    assert torch.equal(grey.net.layer4[1].conv2.weight, saved["layer4.1.conv2.weight"])

    small = ResNet(1, (8, 8), 3, pretrained=True)  # new 3x3 stem, pretrained body
    assert small.net.conv1.weight.shape == (64, 1, 3, 3)
    assert torch.equal(small.net.layer1[0].conv1.weight, saved["layer1.0.conv1.weight"])
    check_trains(small, (1, 8, 8), 3)


def test_models_package_does_not_import_torch() -> None:
    code = "import sys, litforge.models; assert 'torch' not in sys.modules, 'litforge.models imported torch'"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
