"""The export job: checkpoint → ONNX (parity-checked) → int8 variants → a measured compression report.

    python export.py ckpt_path=logs/train/runs/<run>/checkpoints/last.ckpt

1. The task is rebuilt from the checkpoint alone (`litforge.deploy.net.load_exportable`), so any litforge image
   classifier exports: every net, pruned or QAT runs, and a sharded run's consolidated single-file checkpoint.
2. ONNX (`litforge.deploy.onnx`): the net behind its training normalisation (`litforge.deploy.preprocess`: the
   graph takes `input_dtype` images, uint8 0..255 or float [0, 1], NCHW), `torch.onnx.export` with a dynamic batch
   axis, `onnx.checker`, then onnxruntime on the whole test split against PyTorch (`parity.atol`,
   `parity.min_agreement`). Every `.onnx` written carries the deployer's facts in its metadata
   (`litforge.deploy.metadata`).
3. Post-training int8 (`litforge.deploy.quantize`): torchao dynamic int8 of the PyTorch net; onnxruntime dynamic
   int8; onnxruntime static QDQ int8 calibrated on a training subset. A QAT run's `model_int8.pt` (beside the
   checkpoint) joins the report.
4. The report (`litforge.deploy.report`): every variant's size, accuracy and latency, and the fastest variant within
   `report.max_acc_drop` of fp32 — the one to deploy. Written as `compression_report.{csv,md}` in the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from litforge.config.settings import Export, job_settings
from litforge.core.contracts import DeclaresInputs, ImageExportData, StandardizedRows
from litforge.deploy.declared import export_declared
from litforge.deploy.features import export_features
from litforge.deploy.metadata import decision_props, deployment_metadata, write_metadata
from litforge.deploy.net import batched, load_exportable
from litforge.deploy.onnx import check_parity, comparison, export_onnx
from litforge.deploy.preprocess import Preprocessed, as_deployed
from litforge.deploy.quantize import (
    calibration_batches,
    preprocess_for_quantization,
    qat_int8_model,
    quantize_onnx_dynamic,
    quantize_onnx_static,
    torchao_dynamic,
)
from litforge.deploy.report import Variant, build_report, fp32_label, write_report
from litforge.jobs.checks import check_at_start


def export(cfg: DictConfig) -> dict[str, Any]:
    check_at_start(cfg, "export")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Export)  # the job's own keys, typed
    quantize = as_list(settings.quantize)
    input_dtype = settings.input_dtype
    ckpt_path = Path(str(settings.ckpt_path))
    task, datamodule, net, checkpoint = load_exportable(cfg)
    if isinstance(datamodule, StandardizedRows) and not isinstance(datamodule, DeclaresInputs):  # data=csv
        return export_features(cfg, task, datamodule, net, checkpoint)
    if datamodule.kind != "image" or not isinstance(datamodule, ImageExportData):  # declared inputs, a user's data
        return export_declared(cfg, task, datamodule, net, checkpoint)
    out_dir = Path(settings.paths.output_dir)

    # every variant takes what an image decoder gives (uint8 0..255 or float [0, 1], NCHW) and normalises inside;
    # the reference is the bare net on those very pixels normalised as in training (for uint8 images, the split's own)
    torch.manual_seed(settings.seed)
    images, labels = datamodule.split_arrays("test")
    x_test = as_deployed(images, input_dtype).contiguous()
    stats = datamodule.state_dict()
    with torch.inference_mode():
        ref = batched(lambda b: net(datamodule.normalize(b).float()), x_test)

    def deployed(module: Any) -> Any:
        return Preprocessed(module, stats["mean"], stats["std"], input_dtype).eval()

    props = deployment_metadata(
        list(task.hparams["input_shape"]),
        list(datamodule.class_names),
        stats["mean"],
        stats["std"],
        input_dtype,
        ckpt_path,
        checkpoint,
        task=type(task).__module__.rsplit(".", 1)[-1],
    ) | decision_props(task)
    onnx_path = export_onnx(deployed(net), x_test[:2], out_dir / "model.onnx", opset=settings.opset)
    write_metadata(onnx_path, props, variant="fp32")
    parity = check_parity(
        onnx_path,
        x_test,
        ref,
        atol=settings.parity.atol,
        min_agreement=settings.parity.min_agreement,
        compare=comparison(task),
    )

    # the variants, eager fp32 first: the report's baseline
    fp32 = fp32_label(net)
    variants = {
        f"{fp32}, torch eager": Variant("torch", module=deployed(net)),
        f"{fp32}, onnxruntime": Variant("ort", path=onnx_path),
    }
    qat = qat_int8_model(ckpt_path)
    if qat is not None:
        variants["QAT int8, torchao eager"] = Variant("torch", module=deployed(qat[0]), path=qat[1])
    if "torchao_dynamic" in quantize:
        module, file = torchao_dynamic(net, task, out_dir / "model_int8_torchao.pt")
        variants["PTQ int8 dynamic, torchao eager"] = Variant("torch", module=deployed(module), path=file)
    if "onnx_dynamic" in quantize or "onnx_static" in quantize:
        pre = preprocess_for_quantization(onnx_path, out_dir / "model.pre.onnx")
        if "onnx_dynamic" in quantize:
            path = quantize_onnx_dynamic(pre, out_dir)
            write_metadata(path, props, variant="int8 dynamic")
            variants["PTQ int8 dynamic, onnxruntime"] = Variant("ort", path=path)
        if "onnx_static" in quantize:
            calib = calibration_batches(
                datamodule,
                settings.calibration.size,
                settings.calibration.batch_size,
                settings.seed,
                prepare=lambda b: as_deployed(b, input_dtype),
            )
            path = quantize_onnx_static(pre, out_dir, calib)
            write_metadata(path, props, variant="int8 static QDQ")
            variants["PTQ int8 static QDQ, onnxruntime"] = Variant("ort", path=path)
        pre.unlink(missing_ok=True)

    rows = build_report(variants, x_test, labels, ref, settings.report)
    written = write_report(rows, out_dir, settings.report)
    metrics = {"onnx/max_abs_diff": parity["max_abs_diff"], "onnx/argmax_agreement": parity["agreement"]}
    for row in rows:
        metrics[f"acc/{row['variant']}"] = row["test_acc"]
    result = {
        "metrics": metrics,
        "checkpoint": str(settings.ckpt_path),
        "onnx": str(onnx_path),
        "report": rows,
        "output_dir": str(out_dir),
        "written": [str(v.path) for v in variants.values() if v.path] + [str(written)],
    }
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def as_list(value: Any) -> list[str]:
    """`formats=onnx` and `formats=[onnx]` both mean a list of one."""
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]
