"""benchmarks/gpu.py (the one-GPU table) without a GPU: it says so and exits 0, and its CPU dry run executes every
arm of both workloads and prints the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_bench_without_cuda_says_so_and_exits_0():
    """As the lent machine runs it: `PYTHONPATH=src python3 benchmarks/gpu.py` (litforge not pip-installed)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines() == [
        "gpu.py: no CUDA GPU on this machine (torch.cuda.is_available() is False): nothing to run "
        "(--device cpu --tiny runs every arm a few steps on CPU)"
    ]


@pytest.mark.slow  # every arm of the table, each a short training run
def test_gpu_bench_dry_run_executes_every_arm_and_prints_the_table(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu

    assert gpu.main(["--device", "cpu", "--tiny"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| ") and "workload" not in line]
    arms = [(cells[1].strip(), cells[2].strip()) for cells in (line.split("|") for line in table)]
    assert arms == [(w, a) for w in ("resnet", "gpt") for a in ("plain loop", "litforge default", "litforge tuned")]
    for line in table:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert float(cells[2].replace(",", "")) > 0, line  # samples/s measured, not 'failed'
        assert cells[4].endswith("%") and cells[5] == "n/a (CPU)", line
    assert "flex vs mask: CUDA only" in out
    # the tuned arm is the tuned config: its overrides carry the switches the issue names
    tuned = gpu.overrides("resnet", "litforge tuned", "cuda", False, "/tmp/x")
    assert {
        "trainer.precision=bf16-mixed",
        "compile=true",
        "channels_last=true",
        "data.on_device=true",
        "steps_per_call=8",
    } <= set(tuned)
    for arm in ("ddp", "fsdp"):  # the >= 2 GPU arms compose (they cannot run here) and leave out steps_per_call
        cfg = gpu.compose_arm("resnet", arm, "cuda", False, "/tmp/litforge-gpu-compose")
        assert cfg.strategy.get("_target_") and cfg.steps_per_call == 1 and cfg.compile is True
