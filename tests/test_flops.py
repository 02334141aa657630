"""FLOPs per training step against hand counts, the device peaks, and perf/mfu in a default run (issue 31)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, single_run
from litforge.runtime import flops
from litforge.runtime.flops import count_step_flops, cpu_peak_flops, peak_flops, precision_dtype


def mlp_step_flops(batch: int, dims: list[int]) -> int:
    """2·in·out per Linear per sample forward, the same again for each of the weight and the input gradients (×3),
    except the first Linear: its input is the data, which needs no gradient (×2)."""
    per_sample = [2 * a * b for a, b in zip(dims, dims[1:], strict=False)]
    return batch * (2 * per_sample[0] + 3 * sum(per_sample[1:]))


def test_mlp_step_flops_equal_the_hand_count_and_leave_no_trace():
    from litforge.models.mlp import MLP

    torch.manual_seed(0)
    net = MLP(1, (8, 8), 10, hidden_dims=(32, 16), dropout=0.5)  # dropout: the count must not draw from the RNG
    x = torch.randn(4, 1, 8, 8)
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()
    assert count_step_flops(net, lambda: net(x)) == mlp_step_flops(4, [64, 32, 16, 10]) == 48896
    assert torch.equal(rng, torch.get_rng_state())
    assert all(p.grad is None for p in net.parameters())
    assert all(torch.equal(v, weights[k]) for k, v in net.state_dict().items())


def test_batchnorm_statistics_are_unchanged_by_the_count():
    from litforge.models.cnn import CNN

    net = CNN(1, (8, 8), 10)
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    assert count_step_flops(net, lambda: net(torch.randn(4, 1, 8, 8))) > 0
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())


def test_gpt_step_flops_equal_6_n_tokens_plus_attention():
    """6·N·tokens (N: the matmul weights outside the embeddings, the head included) plus attention: 4·B·T²·d per
    layer forward (QKᵀ and AV over every query-key pair, as MFU conventions count causal attention) and 10·B·T²·d
    backward (torch's SDPA formula: five matmuls, the scores recomputed as flash attention does). Tolerance: exact
    (1e-9 relative); against PaLM's 12·B·T²·d·L convention the count is within 5 %."""
    from litforge.models.gpt import GPT

    B, T, d, L, V = 2, 32, 32, 2, 64
    net = GPT(vocab_size=V, block_size=T, dim=d, depth=L, heads=4)
    idx = torch.randint(0, V, (B, T))
    n = sum(m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Linear))
    assert n == L * 12 * d * d + d * V
    hand = 6 * n * B * T + 14 * L * B * T * T * d
    counted = count_step_flops(net, lambda: net(idx, None))
    assert counted == pytest.approx(hand, rel=1e-9)
    assert counted == pytest.approx(6 * n * B * T + 12 * L * B * T * T * d, rel=0.05)


def test_cpu_peak_is_measured_once_and_cached_by_model_dtype_and_threads(tmp_path: Path, monkeypatch):
    measured: list[torch.dtype] = []
    monkeypatch.setattr(flops, "measure_matmul_flops", lambda dtype: measured.append(dtype) or 1e11)
    cache = tmp_path / "peak.json"
    assert cpu_peak_flops(torch.float32, cache) == 1e11
    assert cpu_peak_flops(torch.float32, cache) == 1e11
    assert measured == [torch.float32]
    cpu_peak_flops(torch.bfloat16, cache)
    assert measured == [torch.float32, torch.bfloat16]
    keys = list(json.loads(cache.read_text()))
    assert keys == [f"{flops.cpu_model()}|fp32|{torch.get_num_threads()} threads", keys[0].replace("fp32", "bf16")]


def test_the_real_matmul_peak_is_plausible():
    peak = flops.measure_matmul_flops(torch.float32, size=256, repeats=2)
    assert 1e8 < peak < 1e14


@pytest.mark.parametrize(
    ("name", "precision", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989.5e12),
        ("NVIDIA H100 PCIe", "16-mixed", 756e12),
        ("NVIDIA H200", "bf16-true", 989.5e12),
        ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312e12),
        ("NVIDIA A100-SXM4-80GB", "32-true", 156e12),  # TF32 where float32 matmuls may use it
        ("NVIDIA L4", "bf16-mixed", 121e12),
        ("Tesla T4", "bf16-mixed", None),  # no bf16 on Turing
        ("Some Future GPU", "bf16-mixed", None),
    ],
)
def test_gpu_peaks_come_from_the_datasheet_table(monkeypatch, name, precision, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert peak_flops(torch.device("cuda", 0), precision_dtype(precision)) == peak


@pytest.mark.slow
def test_a_default_run_logs_flops_and_mfu_and_its_summary_counts_flops(tmp_path: Path):
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *TINY, "trainer.log_every_n_steps=2", "logger=[tensorboard,csv]", log_dir=log_dir)
    assert result.returncode == 0, result.output[-3000:]
    run_dir = single_run(log_dir)
    metrics = read_metrics(run_dir)["metrics"]
    # the default net: MLP 64 → 256 → 256 → 10 on 8×8 digits, batches of 64
    assert metrics["perf/flops_per_step"] == mlp_step_flops(64, [64, 256, 256, 10])
    assert 0 < metrics["perf/mfu"] < 1
    assert metrics["perf/flops_per_sec"] > 0
    # the loggers get them at the logging cadence too, not only per epoch
    rows = [row for f in run_dir.rglob("metrics.csv") for row in csv.DictReader(f.open())]
    assert sum(1 for row in rows if row.get("perf/mfu")) >= 3, rows
    # Lightning's model summary: forward FLOPs of one sample (2·64·256 + 2·256·256 + 2·256·10 = 168,960)
    assert "Total FLOPs: 168 K" in result.output, result.output[-3000:]
