"""The compression report: every deployable variant measured the same way, and the one to deploy.

Per variant: the file size (raw and zip-compressed: pruning's zeros only shrink the latter), test accuracy,
agreement with fp32, latency at each batch size and thread count (:mod:`litforge.deploy.latency`: medians of
interleaved rounds) and the speed-up against the first variant (eager PyTorch fp32); then the fastest variant within
`report.max_acc_drop` of fp32. Written as `compression_report.{csv,md}`. Why one table: a size, an accuracy and a
latency measured by three different scripts on three different days cannot be traded against each other.
"""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from litforge.callbacks.pruning import PRUNABLE
from litforge.config.settings import Report
from litforge.deploy.latency import markdown_table, measure, onnx_runner, resolve_threads, torch_runner
from litforge.deploy.net import batched

if TYPE_CHECKING:
    from torch import Tensor, nn


@dataclass
class Variant:
    """One deployable form of the net: `runtime` "torch" runs `module`; "ort" runs the ONNX file at `path`.

    `path` is the file a user would ship (its size is reported); None for the eager fp32 net, whose size is that of
    its saved state dict.
    """

    runtime: str
    module: Any = None
    path: Path | None = None


def weight_sparsity(net: nn.Module) -> float:
    """Fraction of exactly-zero weights in Linear/Conv layers (what pruning leaves)."""
    zeros = total = 0
    for module in net.modules():
        if isinstance(module, PRUNABLE):
            zeros += int((module.weight == 0).sum())
            total += module.weight.numel()
    return zeros / max(total, 1)


def fp32_label(net: nn.Module) -> str:
    """How the report names the checkpoint's own net: "fp32", or "pruned fp32 (50% zeros)" after pruning."""
    sparsity = weight_sparsity(net)
    return f"pruned fp32 ({sparsity:.0%} zeros)" if sparsity >= 0.01 else "fp32"


def file_bytes(variant: Variant) -> bytes:
    """The bytes a deployment ships: the file (with an ONNX model's external `.data` file), or the saved state."""
    if variant.path is None:
        buffer = io.BytesIO()
        torch.save(variant.module.state_dict(), buffer)
        return buffer.getvalue()
    data = variant.path.read_bytes()
    external = variant.path.with_name(variant.path.name + ".data")
    return data + (external.read_bytes() if external.exists() else b"")


def build_report(
    variants: dict[str, Variant], x: Tensor, labels: Tensor, ref: Tensor, report_cfg: Report
) -> list[dict[str, Any]]:
    """One row per variant (the first is the baseline): sizes, test accuracy, fp32 agreement, latency, speed-up."""
    factories = {
        name: torch_runner(v.module) if v.runtime == "torch" else onnx_runner(str(v.path))
        for name, v in variants.items()
    }
    threads = resolve_threads(list(report_cfg.threads))
    batch_sizes = [int(b) for b in report_cfg.batch_sizes]
    inputs = {
        b: x[:b].contiguous() if len(x) >= b else x.repeat((b + len(x) - 1) // len(x), 1, 1, 1)[:b] for b in batch_sizes
    }
    timing = measure(factories, inputs, threads, rounds=int(report_cfg.rounds))

    rows = []
    baseline = next(iter(variants))  # eager PyTorch fp32 of the checkpoint
    for name, v in variants.items():
        run = factories[name](0 if v.runtime == "ort" else torch.get_num_threads())
        with torch.inference_mode():
            out = batched(partial(_logits, run), x)
        data = file_bytes(v)
        row: dict[str, Any] = {
            "variant": name,
            "size_mb": round(len(data) / 1e6, 4),
            "zipped_mb": round(len(zlib.compress(data, 6)) / 1e6, 4),
            "test_acc": round(float((out.argmax(1) == labels).float().mean()), 4),
            "agree_fp32": round(float((out.argmax(1) == ref.argmax(1)).float().mean()), 4),
        }
        for t in threads:
            for b in batch_sizes:
                ms = timing.get(name, b, t)
                base = timing.get(baseline, b, t)
                assert ms is not None and base is not None  # measure() timed every variant at every (b, t)
                row[f"ms_b{b}_t{t}"] = round(ms, 4)
                row[f"x_b{b}_t{t}"] = round(base / ms, 2)
        rows.append(row)
    return rows


def _logits(run: Callable[[Tensor], object], batch: Tensor) -> Tensor:
    """What `run` gives for `batch`: onnxruntime returns a list of outputs, PyTorch the tensor itself (`run` is bound
    with functools.partial when the loop builds it, not when `batched` calls it)."""
    out = run(batch)
    return torch.as_tensor(out[0] if isinstance(out, (list, tuple)) else out)


def recommend(rows: list[dict[str, Any]], key: str, max_drop: float) -> str:
    """The fastest variant at `key` whose accuracy is within `max_drop` of the fp32 baseline."""
    base_acc = rows[0]["test_acc"]
    ok = [r for r in rows if r["test_acc"] >= base_acc - max_drop]
    return min(ok, key=lambda r: r[key])["variant"]


def write_report(rows: list[dict[str, Any]], out_dir: Path, report_cfg: Report) -> Path:
    """`compression_report.csv` (every figure) and `compression_report.md` (the table, how to read it, the pick)."""
    header = list(rows[0])
    with (out_dir / "compression_report.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    timing_keys = [k for k in header if k.startswith("ms_")]
    notes = [
        f"- fastest within {report_cfg.max_acc_drop:.0%} accuracy of fp32 at {k[3:]}: "
        f"**{recommend(rows, k, float(report_cfg.max_acc_drop))}**"
        for k in timing_keys
    ]
    text = (
        "# Compression report\n\n"
        "`ms_b<B>_t<T>`: median milliseconds per batch of B images on T CPU threads (interleaved rounds, "
        f"{report_cfg.rounds} per figure); `x_…`: speed-up against the first row (eager PyTorch fp32). "
        "`zipped_mb`: the file zip-compressed (pruned zeros only shrink this). On a shared CPU the figures are "
        "noisy: compare ratios, rerun for confirmation.\n\n"
        + markdown_table(header, [list(r.values()) for r in rows])
        + "\n"
        + "\n".join(notes)
        + "\n"
    )
    path = out_dir / "compression_report.md"
    path.write_text(text)
    print(text)
    return path
