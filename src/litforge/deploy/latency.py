"""One latency harness for every inference figure litforge prints (export's compression report, benchmarks/).

Why a shared module: two tables that time things differently cannot be compared. The rules here:

- every variant is timed on the same input tensor, after warm-up;
- variants are *interleaved*: each round times every variant once (in a rotating order), and the figure is the
  median over rounds, so a burst of load from another process on a shared CPU hits all variants alike instead of
  whichever happened to run at that moment;
- a round times a block of calls long enough (`min_block_s`) for the timer to be exact even for ~10 µs calls;
- thread counts are explicit: torch via `torch.set_num_threads`, onnxruntime sessions are built per thread count
  (their pool is fixed at creation), so each figure says which it is.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

#: a variant factory: given a thread count, return a function that runs one batch
RunnerFactory = Callable[[int], Callable[[Tensor], Any]]


@dataclass
class LatencyResult:
    """Median milliseconds per batch, keyed by (variant, batch_size, threads)."""

    median_ms: dict[tuple[str, int, int], float] = field(default_factory=dict)
    rounds: int = 0

    def get(self, variant: str, batch_size: int, threads: int) -> float | None:
        return self.median_ms.get((variant, batch_size, threads))


def all_threads() -> int:
    """The CPU threads this process may use (respects taskset/cgroup affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def resolve_threads(spec: Sequence[int | str]) -> list[int]:
    """`[1, "all"]` → `[1, <cpu count>]` without duplicates."""
    out: list[int] = []
    for item in spec:
        n = all_threads() if str(item) == "all" else int(item)
        if n not in out:
            out.append(n)
    return out


def _calls_per_block(fn: Callable[[Tensor], Any], x: Tensor, min_block_s: float) -> int:
    start = time.perf_counter()
    fn(x)
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(1000, int(min_block_s / once)))


def measure(
    factories: dict[str, RunnerFactory],
    inputs: dict[int, Tensor],
    threads: Sequence[int],
    rounds: int = 15,
    warmup: int = 3,
    min_block_s: float = 0.005,
) -> LatencyResult:
    """Median latency (ms per batch) of each variant × batch size × thread count, interleaved across variants."""
    result = LatencyResult(rounds=rounds)
    previous = torch.get_num_threads()
    try:
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            runners = {name: make(n_threads) for name, make in factories.items()}
            for batch_size, x in inputs.items():
                with torch.inference_mode():
                    for fn in runners.values():
                        for _ in range(warmup):
                            fn(x)
                    calls = {name: _calls_per_block(fn, x, min_block_s) for name, fn in runners.items()}
                    samples: dict[str, list[float]] = {name: [] for name in runners}
                    names = list(runners)
                    for r in range(rounds):
                        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
                        for name in order:
                            fn, k = runners[name], calls[name]
                            start = time.perf_counter()
                            for _ in range(k):
                                fn(x)
                            samples[name].append((time.perf_counter() - start) / k * 1e3)
                for name, values in samples.items():
                    result.median_ms[(name, batch_size, n_threads)] = statistics.median(values)
    finally:
        torch.set_num_threads(previous)
    return result


def torch_runner(
    module: torch.nn.Module, dtype: torch.dtype | None = None, memory_format: torch.memory_format | None = None
) -> RunnerFactory:
    """Eager PyTorch inference (optionally bf16 autocast or channels_last input) as a variant factory."""

    def make(_threads: int) -> Callable[[Tensor], Any]:
        def run(x: Tensor) -> Any:
            if memory_format is not None:
                x = x.contiguous(memory_format=memory_format)
            if dtype is not None:
                with torch.autocast("cpu", dtype=dtype):
                    return module(x)
            return module(x)

        return run

    return make


def onnx_runner(path: str, input_name: str = "images") -> RunnerFactory:
    """An onnxruntime CPU session per thread count as a variant factory."""

    def make(threads: int) -> Callable[[Tensor], Any]:
        import onnxruntime as ort  # extra [deploy]

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return lambda x: session.run(None, {input_name: x.numpy()})

    return make


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
