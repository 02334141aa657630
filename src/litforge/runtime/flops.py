"""FLOPs of one training step, and the device's peak they are measured against (`perf/flops_per_sec`, `perf/mfu`).

Why not only Lightning's public helpers (lightning_fabric.utilities.throughput):

- `measure_flops` runs the model's backward with `.backward()`, which accumulates into the live weights' `.grad`;
  the count here takes the gradients with `torch.autograd.grad` (nothing accumulated, no DDP/FSDP gradient hook
  fires), forks the RNG (dropout draws nothing from the run's stream) and puts buffers back (BatchNorm's running
  statistics are unchanged), so counting at fit start leaves the run bit-identical.
- `get_available_flops` answers None on CPU and for the plain names current drivers give ("NVIDIA H200"), and its
  Hopper rows mix dense and sparse figures. :data:`GPU_PEAK` holds dense figures from the vendor datasheets; on a CPU
  the peak is a matmul measured once and cached (:func:`cpu_peak_flops`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from litforge.runtime.compat import without_recompute

log = logging.getLogger(__name__)

# Dense (no structured sparsity) peak FLOP/s per GPU, from NVIDIA's datasheets: H100/H200 SXM and PCIe/NVL
# ("NVIDIA H100 Tensor Core GPU" and "NVIDIA H200 Tensor Core GPU" datasheets, whose tensor figures are "with
# sparsity": halved here), A100 ("NVIDIA A100 Tensor Core GPU" datasheet, 80GB SXM/PCIe), L4 and L40S (their product
# datasheets, sparse figures halved), V100 SXM2 and T4 (their datasheets; no bf16). The first key found in the
# lower-cased device name wins, so the more specific names come first.
GPU_PEAK: dict[str, dict[str, float]] = {
    "h200 nvl": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "h200": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "h100 pcie": {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
    "h100 nvl": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "h100": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12},
    "a100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "l40s": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 366e12, "fp16": 366e12},
    "l4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
    "v100": {"fp32": 15.7e12, "fp16": 125e12},
    "t4": {"fp32": 8.1e12, "fp16": 65e12},
}

# Memory per GPU as sold, in GiB (an "80 GB" H100 or A100 holds 80 GiB of HBM, of which the driver and the CUDA
# context keep ~1 GiB): the dry run's default per-rank budget (dry_run_gpu; litforge.parallel.dry_run).
GPU_MEMORY_GIB: dict[str, float] = {
    "h200 nvl": 141, "h200": 141, "h100 pcie": 80, "h100 nvl": 94, "h100": 80, "a100 40gb": 40, "a100": 80,
    "l40s": 48, "l4": 24, "v100": 32, "t4": 16,
}  # fmt: skip

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def precision_dtype(precision: str) -> torch.dtype:
    """The matmul dtype of a Lightning precision setting ("bf16-mixed" → bf16, "16-mixed" → fp16, else fp32)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return torch.float32


def peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """Peak FLOP/s of one device in `dtype`: the datasheet's on a known GPU, a measured matmul on a CPU, else None."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        key = _DTYPE_NAMES.get(dtype, "fp32")
        if key == "fp32" and torch.get_float32_matmul_precision() != "highest":
            key = "tf32"  # float32 matmuls run on the tensor cores (Ampere and later)
        for chip, figures in GPU_PEAK.items():
            if chip in name:
                return figures.get(key) or (figures["fp32"] if key == "tf32" else None)
        return None
    if device.type == "cpu":
        return cpu_peak_flops(dtype)
    return None


def cache_dir() -> Path:
    """The user's cache folder ($XDG_CACHE_HOME or ~/.cache) for litforge."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "litforge"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux): the measured peak is valid for that chip only."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_peak_flops(dtype: torch.dtype = torch.float32, path: Path | None = None) -> float:
    """The CPU's best square-matmul FLOP/s in `dtype` with the current thread count, measured once (~0.5 s) and
    cached in `path` (default <cache dir>/cpu_peak_flops.json), keyed by CPU model, dtype and threads: a datasheet
    peak for CPUs would need the clock under load and the vector units, which the OS does not report."""
    path = path or cache_dir() / "cpu_peak_flops.json"
    key = f"{cpu_model()}|{_DTYPE_NAMES.get(dtype, str(dtype))}|{torch.get_num_threads()} threads"
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached, dict) and isinstance(cached.get(key), (int, float)):
        return float(cached[key])
    peak = measure_matmul_flops(dtype)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**(cached if isinstance(cached, dict) else {}), key: peak}, indent=2))
        tmp.replace(path)  # atomic: parallel runs never read half a file
    except OSError as exc:
        log.warning("CPU peak FLOP/s not cached (%s): it is measured again next run", exc)
    return peak


def measure_matmul_flops(dtype: torch.dtype = torch.float32, size: int = 1024, repeats: int = 5) -> float:
    """Best of `repeats` timed `size`² matmuls (2·size³ FLOPs each), after one warm-up, on the RNG's fork."""
    with torch.random.fork_rng(devices=[]):
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


# (FlopCounterMode hands a formula its tensor arguments' shapes, then the op's other arguments, unused here)
def _cpu_sdpa(query: torch.Size, key: torch.Size, value: torch.Size, *args: object, **kwargs: object) -> int:
    return int(sdpa_flop_count(query, key, value))


def _cpu_sdpa_backward(
    grad_out: torch.Size, query: torch.Size, key: torch.Size, value: torch.Size, *args: object, **kwargs: object
) -> int:
    return int(sdpa_backward_flop_count(grad_out, query, key, value))


# torch's FlopCounterMode has formulas for the CUDA attention kernels only: SDPA's CPU kernel (which the GPT and ViT
# take on a CPU) would count 0 FLOPs. Same formulas: 4·B·H·T·S·D forward (QKᵀ and AV, every query-key pair, the
# causal half included, as MFU conventions count it), twice that backward.
# (the kernels' names in torch's op registry, looked up by name: an op missing from a torch build counts as 0 FLOPs)
_CPU_ATTENTION = {
    op: formula
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _cpu_sdpa),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_sdpa_backward),
    )
    if (op := getattr(torch.ops.aten, name, None)) is not None
}


def count_step_flops(net: nn.Module, forward: Callable[[], Any]) -> int:
    """FLOPs of one forward and backward of `net` (`forward()` calls it on a real batch), without side effects.

    The backward starts from the outputs' sum: its cost is that of the loss's backward through the net (the loss
    itself is a few elementwise FLOPs per output). Gradients go to `torch.autograd.grad`, not `.grad`; the RNG is
    forked and the buffers restored; activation checkpointing's recompute is not counted (model FLOPs, not hardware
    FLOPs); compiled modules run eagerly here (`torch.compiler.set_stance`), so counting
    compiles nothing.
    """
    params = [p for p in net.parameters() if p.requires_grad]
    buffers = {name: b.detach().clone() for name, b in net.named_buffers()}
    devices = sorted({p.device.index for p in params if p.device.type == "cuda" and p.device.index is not None})
    counter = FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION)
    # model FLOPs, as MFU counts them: activation checkpointing's recompute is left out (without_recompute)
    try:
        with (
            without_recompute(net),
            torch.random.fork_rng(devices=devices),
            torch.compiler.set_stance("force_eager"),
            counter,
        ):
            out = forward()
            outputs = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
            total = sum(t.float().sum() for t in outputs if t.requires_grad)
            if params and isinstance(total, torch.Tensor):
                torch.autograd.grad(total, params, allow_unused=True)
    finally:
        with torch.no_grad():
            for name, b in net.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
    return int(counter.get_total_flops())
