"""The export job: checkpoint → ONNX (parity-checked) → int8 variants → a measured compression report.

    python export.py ckpt_path=logs/train/runs/<run>/checkpoints/last.ckpt

1. The task is rebuilt from the checkpoint alone (`litforge.eval.load_for_inference`), so any litforge image
   classifier exports: every net, pruned or QAT runs, and a sharded run's consolidated single-file checkpoint.
2. ONNX: `torch.onnx.export` (dynamo exporter) with a dynamic batch axis, weights embedded in `model.onnx` when
   they fit in one protobuf (else `model.onnx` + `model.onnx.data`, which must stay together), `onnx.checker`,
   then onnxruntime on the whole test split against PyTorch: max |Δlogits| and argmax agreement, printed and
   enforced (`parity.atol`, `parity.min_agreement`).
3. Post-training int8: torchao dynamic int8 of the PyTorch net; onnxruntime dynamic int8 (`quantize_dynamic`);
   onnxruntime static QDQ int8 calibrated on a training subset (`quantize_static`). A QAT run's
   `model_int8.pt` (beside the checkpoint) joins the report.
4. The report: every variant's file size (raw and zip-compressed: pruning's zeros only shrink the latter), test
   accuracy, agreement with fp32, latency at each batch size and thread count (`litforge.latency`: medians of
   interleaved rounds), speed-up against eager PyTorch fp32, and the fastest variant within `report.max_acc_drop`
   of fp32 — the one to deploy. Written as `compression_report.{csv,md}` in the run folder.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import zlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

FORMATS = ("onnx",)
QUANTIZATIONS = ("torchao_dynamic", "onnx_dynamic", "onnx_static")
# key prefixes that wrappers leave on state-dict keys (torch.compile, DDP/FSDP wrappers); a consolidated checkpoint
# may carry them, the plain task does not
WRAPPER_PREFIXES = ("_orig_mod.", "_forward_module.", "module.")
MAX_EMBEDDED_BYTES = 1 << 30  # protobuf's limit is 2 GiB; beyond 1 GiB keep weights in model.onnx.data


def export(cfg: DictConfig) -> dict[str, Any]:
    formats = as_list(cfg.formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ConfigError(f"formats={formats}: unknown export format {unknown or '(none)'}; supported: "
                          f"{', '.join(FORMATS)} (e.g. formats=[onnx])")
    quantize = as_list(cfg.quantize)
    bad = [q for q in quantize if q not in QUANTIZATIONS]
    if bad:
        raise ConfigError(f"quantize={quantize}: unknown {bad}; choose from {', '.join(QUANTIZATIONS)} "
                          "(or quantize=[])")

    import torch

    from litforge.checkpoints import load_checkpoint
    from litforge.restore import load_for_inference

    path = str(cfg.ckpt_path)
    checkpoint = strip_wrapper_prefixes(load_checkpoint(path))
    task, datamodule, checkpoint = load_for_inference(cfg, checkpoint=checkpoint)
    net = exportable_net(task, path)
    out_dir = Path(cfg.paths.output_dir)

    torch.manual_seed(int(cfg.seed))
    images, labels = datamodule.split_arrays("test")
    x_test = datamodule.normalize(images).float().contiguous()
    with torch.inference_mode():
        ref = batched(net, x_test)

    for name in ("onnxscript", "onnx_ir"):  # the exporter's optimiser narrates every pass at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    onnx_path = export_onnx(net, x_test[:2], out_dir / "model.onnx", opset=cfg.get("opset"))
    parity = check_parity(onnx_path, x_test, ref, atol=float(cfg.parity.atol),
                          min_agreement=float(cfg.parity.min_agreement))

    variants: dict[str, dict[str, Any]] = {}
    sparsity = weight_sparsity(net)
    label = f"pruned fp32 ({sparsity:.0%} zeros)" if sparsity >= 0.01 else "fp32"
    variants[f"{label}, torch eager"] = {"runtime": "torch", "module": net,
                                         "bytes": serialized_state(net)}
    variants[f"{label}, onnxruntime"] = {"runtime": "ort", "path": onnx_path}

    qat_file = Path(path).parent / "model_int8.pt"
    if qat_file.is_file():
        from litforge.callbacks.qat import int8_source, load_int8_model

        source = int8_source(qat_file)
        if source == Path(path).name:
            variants["QAT int8, torchao eager"] = {"runtime": "torch", "module": load_int8_model(qat_file),
                                                   "file": qat_file}
        else:
            print(f"note: {qat_file.name} was converted from {source}, not {Path(path).name}: export "
                  f"ckpt_path={Path(path).parent / str(source)} to compare with the QAT int8 model")
    if "torchao_dynamic" in quantize:
        from litforge.callbacks.qat import convert_int8, save_int8_model

        ptq = convert_int8(net)
        file = save_int8_model(ptq, task, out_dir / "model_int8_torchao.pt")
        variants["PTQ int8 dynamic, torchao eager"] = {"runtime": "torch", "module": ptq, "file": file}
    if "onnx_dynamic" in quantize or "onnx_static" in quantize:
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.WARNING)  # onnxruntime's quantizer logs every tensor at INFO on the root logger
        try:
            pre = preprocess_for_quantization(onnx_path, out_dir / "model.pre.onnx")
            if "onnx_dynamic" in quantize:
                variants["PTQ int8 dynamic, onnxruntime"] = {"runtime": "ort",
                                                             "path": quantize_onnx_dynamic(pre, out_dir)}
            if "onnx_static" in quantize:
                calib = calibration_batches(datamodule, int(cfg.calibration.size),
                                            int(cfg.calibration.batch_size), int(cfg.seed))
                variants["PTQ int8 static QDQ, onnxruntime"] = {"runtime": "ort",
                                                                "path": quantize_onnx_static(pre, out_dir, calib)}
            pre.unlink(missing_ok=True)
        finally:
            root.setLevel(level)

    rows = build_report(variants, x_test, labels, ref, cfg.report)
    written = write_report(rows, out_dir, cfg.report)
    metrics = {"onnx/max_abs_diff": parity["max_abs_diff"], "onnx/argmax_agreement": parity["agreement"]}
    for row in rows:
        metrics[f"acc/{row['variant']}"] = row["test_acc"]
    result = {"metrics": metrics, "checkpoint": path, "onnx": str(onnx_path), "report": rows,
              "output_dir": str(out_dir), "written": str(written)}
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def as_list(value: Any) -> list[str]:
    """`formats=onnx` and `formats=[onnx]` both mean a list of one."""
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


# ---- loading ---------------------------------------------------------------------------------------------------
def strip_wrapper_prefixes(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Drop `_orig_mod.` / `_forward_module.` / `module.` key prefixes a wrapped model may have saved."""
    state = checkpoint["state_dict"]
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if state and all(prefix in k for k in state):
                state = {k.replace(prefix, "", 1): v for k, v in state.items()}
                changed = True
    checkpoint["state_dict"] = state
    return checkpoint


def exportable_net(task: Any, path: str) -> Any:
    """The plain fp32 `nn.Module` of an image classifier; any other checkpoint gets a clear refusal."""
    import torch

    net = getattr(task, "net", None)
    shape = task.hparams.get("input_shape") if hasattr(task, "hparams") else None
    if getattr(task, "data_kind", None) != "image" or not isinstance(net, torch.nn.Module) or not shape:
        raise CheckpointError(f"{path} holds a {type(task).__name__}, not an image classifier: export.py exports "
                              "image classification checkpoints (task=classification) only")
    return net.float().cpu().eval()


def batched(fn: Any, x: Any, batch_size: int = 256) -> Any:
    import torch

    return torch.cat([torch.as_tensor(fn(x[i : i + batch_size])) for i in range(0, len(x), batch_size)])


# ---- ONNX ------------------------------------------------------------------------------------------------------
def export_onnx(net: Any, example: Any, path: Path, opset: int | None = None) -> Path:
    """Dynamo export with a dynamic batch axis; weights embedded unless they exceed ~1 GiB."""
    import torch
    from torch.export import Dim

    path.parent.mkdir(parents=True, exist_ok=True)
    weight_bytes = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    embed = weight_bytes < MAX_EMBEDDED_BYTES
    try:
        torch.onnx.export(net, (example,), str(path), dynamo=True, input_names=["images"], output_names=["logits"],
                          dynamic_shapes=({0: Dim("batch")},), external_data=not embed, opset_version=opset,
                          verbose=False)
    except Exception as exc:  # an op the exporter cannot translate: name the net and the op
        raise ConfigError(f"torch.onnx.export failed for {type(net).__name__}: {str(exc).splitlines()[0]}") from exc
    import onnx

    onnx.checker.check_model(str(path))  # by path: also validates an external model.onnx.data
    return path


def ort_session(path: Path | str, threads: int = 0) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_parity(onnx_path: Path, x: Any, ref: Any, atol: float, min_agreement: float) -> dict[str, float]:
    """onnxruntime vs PyTorch on the whole test split; a mismatch beyond the tolerances stops the export."""
    import torch

    session = ort_session(onnx_path)
    out = batched(lambda b: session.run(None, {"images": b.numpy()})[0], x)
    diff = float((out - ref).abs().max())
    agreement = float((out.argmax(1) == ref.argmax(1)).float().mean())
    print(f"ONNX parity on {len(x)} test images: max |logits diff| = {diff:.2e} (limit {atol:g}), "
          f"argmax agreement = {agreement:.2%} (limit {min_agreement:.1%})")
    if not (diff <= atol and agreement >= min_agreement) or not torch.isfinite(out).all():
        raise ConfigError(f"ONNX parity failed: max |diff| {diff:.3g} (limit {atol:g}), agreement {agreement:.4f} "
                          f"(limit {min_agreement}); the exported model is not trustworthy: try another opset= "
                          "or report the net")
    return {"max_abs_diff": diff, "agreement": agreement}


def preprocess_for_quantization(onnx_path: Path, out: Path) -> Path:
    """onnxruntime's pre-processing (shape inference, graph optimisation) before quantizing.

    Symbolic shape inference is skipped: it fails on the dynamo exporter's graphs, and ONNX shape inference suffices.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(onnx_path), str(out), skip_symbolic_shape=True)
    return out


def quantize_onnx_dynamic(pre: Path, out_dir: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = out_dir / "model_int8_dynamic.onnx"
    quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8, per_channel=True)
    return out


def calibration_batches(datamodule: Any, size: int, batch_size: int, seed: int) -> list[Any]:
    """A seeded random subset of the training split, normalised like training, for static quantization."""
    import torch

    images, _ = datamodule.split_arrays("train")
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:size]
    x = datamodule.normalize(images[order]).float()
    return [x[i : i + batch_size] for i in range(0, len(x), batch_size)]


def quantize_onnx_static(pre: Path, out_dir: Path, batches: list[Any]) -> Path:
    """QDQ int8 (per-channel int8 weights, uint8 activations) with ranges calibrated on `batches`."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"images": b.numpy()} for b in batches])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.items, None)

    out = out_dir / "model_int8_static.onnx"
    quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


# ---- measuring ---------------------------------------------------------------------------------------------------
def weight_sparsity(net: Any) -> float:
    """Fraction of exactly-zero weights in Linear/Conv layers (what pruning leaves)."""
    from litforge.callbacks.pruning import PRUNABLE

    zeros = total = 0
    for module in net.modules():
        if isinstance(module, PRUNABLE):
            zeros += int((module.weight == 0).sum())
            total += module.weight.numel()
    return zeros / max(total, 1)


def serialized_state(module: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getvalue()


def file_bytes(variant: dict[str, Any]) -> bytes:
    if "bytes" in variant:
        return variant["bytes"]
    path = Path(variant.get("path") or variant["file"])
    data = path.read_bytes()
    external = path.with_name(path.name + ".data")
    return data + (external.read_bytes() if external.exists() else b"")


def build_report(variants: dict[str, dict[str, Any]], x: Any, labels: Any, ref: Any,
                 report_cfg: Any) -> list[dict[str, Any]]:
    import torch

    from litforge.latency import measure, onnx_runner, resolve_threads, torch_runner

    factories = {}
    for name, v in variants.items():
        factories[name] = torch_runner(v["module"]) if v["runtime"] == "torch" else onnx_runner(str(v["path"]))
    threads = resolve_threads(list(report_cfg.threads))
    batch_sizes = [int(b) for b in report_cfg.batch_sizes]
    inputs = {b: x[:b].contiguous() if len(x) >= b else x.repeat((b + len(x) - 1) // len(x), 1, 1, 1)[:b]
              for b in batch_sizes}
    timing = measure(factories, inputs, threads, rounds=int(report_cfg.rounds))

    rows = []
    baseline = next(iter(variants))  # eager PyTorch fp32 of the checkpoint
    for name, v in variants.items():
        run = factories[name](0 if v["runtime"] == "ort" else torch.get_num_threads())
        with torch.inference_mode():
            out = batched(lambda b: _first(run(b)), x)
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
                row[f"ms_b{b}_t{t}"] = round(ms, 4)
                row[f"x_b{b}_t{t}"] = round(base / ms, 2)
        rows.append(row)
    return rows


def _first(out: Any) -> Any:
    import torch

    return torch.as_tensor(out[0]) if isinstance(out, (list, tuple)) else out


def recommend(rows: list[dict[str, Any]], key: str, max_drop: float) -> str:
    """The fastest variant at `key` whose accuracy is within `max_drop` of the fp32 baseline."""
    base_acc = rows[0]["test_acc"]
    ok = [r for r in rows if r["test_acc"] >= base_acc - max_drop]
    return min(ok, key=lambda r: r[key])["variant"]


def write_report(rows: list[dict[str, Any]], out_dir: Path, report_cfg: Any) -> Path:
    from litforge.latency import markdown_table

    header = list(rows[0])
    with (out_dir / "compression_report.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    timing_keys = [k for k in header if k.startswith("ms_")]
    notes = [f"- fastest within {report_cfg.max_acc_drop:.0%} accuracy of fp32 at {k[3:]}: "
             f"**{recommend(rows, k, float(report_cfg.max_acc_drop))}**" for k in timing_keys]
    text = ("# Compression report\n\n"
            "`ms_b<B>_t<T>`: median milliseconds per batch of B images on T CPU threads (interleaved rounds, "
            f"{report_cfg.rounds} per figure); `x_…`: speed-up against the first row (eager PyTorch fp32). "
            "`zipped_mb`: the file zip-compressed (pruned zeros only shrink this). On a shared CPU the figures are "
            "noisy: compare ratios, rerun for confirmation.\n\n"
            + markdown_table(header, [list(r.values()) for r in rows]) + "\n" + "\n".join(notes) + "\n")
    path = out_dir / "compression_report.md"
    path.write_text(text)
    print(text)
    return path
