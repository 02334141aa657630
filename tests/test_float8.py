"""float8=tensorwise|rowwise (litforge.models.float8): refused in one line where float8 matmuls cannot run (this CPU,
a GPU older than compute capability 8.9), and the conversion itself, which builds on CPU and on meta: which Linear
layers become torchao's Float8Linear, with the state-dict names (and the GPT's tied head) unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import run_cli
from litforge.core.errors import ConfigError
from litforge.models.float8 import convert_to_float8, float8_layers, float8_refusal
from litforge.models.gpt import GPT
from litforge.models.mlp import MLP

pytest.importorskip("torchao", reason="float8 converts through torchao (the deploy extra)")


@pytest.mark.slow
def test_float8_on_cpu_is_refused_in_one_line_before_the_run_folder(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", "trainer=cpu", "float8=tensorwise", "print_config=false", log_dir=log_dir)
    assert result.returncode == 1, result.output[-2000:]
    errors = [line for line in result.output.splitlines() if "litforge: error:" in line]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output[-3000:]
    assert "float8=tensorwise" in errors[0] and "compute capability >= 8.9" in errors[0], errors
    assert "trainer.accelerator=cpu: pass float8=none" in errors[0], errors
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))  # refused before Hydra made a run folder


def test_the_refusal_names_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "this machine has no CUDA GPU: pass float8=none" in str(float8_refusal("rowwise", "auto"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    assert "this NVIDIA A100-SXM4-80GB has 8.0: pass float8=none" in str(float8_refusal("tensorwise", "gpu"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert float8_refusal("tensorwise", "gpu") is None  # an H100: runs


def test_the_job_refuses_before_building(compose_cfg, monkeypatch) -> None:
    """train's declared checks (litforge.jobs.checks) refuse float8 where it cannot run, also for a job called in
    code, before any net is built; the builder itself no longer judges it again."""
    from litforge.jobs import build
    from litforge.jobs.train import train

    monkeypatch.setattr(build, "build_task", lambda *a: pytest.fail("built"))
    with pytest.raises(ConfigError, match=r"float8=rowwise .* trainer.accelerator=cpu"):
        train(compose_cfg("float8=rowwise", "trainer.accelerator=cpu"))


def test_gpt_conversion_keeps_names_and_the_tied_head() -> None:
    torch.manual_seed(0)
    net = GPT(32, 16, dim=32, depth=2, heads=2)
    names, values = list(net.state_dict()), {k: v.clone() for k, v in net.state_dict().items()}
    converted = convert_to_float8(net, "tensorwise", fsdp_all_gather=True)
    # every attention and MLP projection of every block; not the head (the output layer), which stays a Linear
    expected = [f"blocks.{i}.{layer}" for i in range(2) for layer in ("attn.k", "attn.proj", "attn.q", "attn.v")]
    expected += [f"blocks.{i}.mlp.{layer}" for i in range(2) for layer in ("fc1", "fc2")]
    assert converted == sorted(expected)
    modules = dict(net.named_modules())
    assert all(type(modules[name]).__name__ == "Float8Linear" for name in converted)
    assert type(net.head) is nn.Linear and net.head.weight is net.tok_embed.weight
    assert list(net.state_dict()) == names  # checkpoints, eval.py and resume see the same keys and values
    assert all(torch.equal(v, values[k]) for k, v in net.state_dict().items())
    assert modules["blocks.0.attn.q"].config.enable_fsdp_float8_all_gather  # FSDP2: weights gathered in float8
    rowwise = GPT(32, 16, dim=32, depth=1, heads=2)
    convert_to_float8(rowwise, "rowwise", fsdp_all_gather=True)  # torchao gathers tensorwise scales only
    assert not rowwise.blocks[0].attn.q.config.enable_fsdp_float8_all_gather


def test_layers_whose_sizes_are_not_multiples_of_16_stay_and_meta_nets_convert() -> None:
    with torch.device("meta"):  # meta init (strategy=fsdp): converted before any storage exists
        net = MLP(1, (8, 8), 10, hidden_dims=(32, 20, 48), dropout=0.0)
    # net.1: 64 -> 32 (converted), net.3: 32 -> 20 and net.5: 20 -> 48 (20 is not a multiple of 16), net.7: the output
    assert float8_layers(net) == ["net.1"]
    assert convert_to_float8(net, "tensorwise") == ["net.1"]
    assert type(net.net[1]).__name__ == "Float8Linear" and net.net[1].weight.is_meta
    with pytest.raises(ConfigError, match=r"found no Linear layer of MLP .* pass float8=none"):
        convert_to_float8(MLP(1, (3, 3), 10, hidden_dims=(20,), dropout=0.0), "tensorwise")
