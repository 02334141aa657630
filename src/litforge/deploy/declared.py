"""Exporting a model from the inputs its datamodule declares (litforge.core.contracts.DeclaresInputs), or, for a
user's datamodule that declares none, from its test split's inputs as its `on_after_batch_transfer` gives them.

The datamodule names the deployed graph's inputs, their dtypes and their dynamic axes (`example_inputs()`: a text
model takes int64 token ids with a dynamic batch and length) and what a deployer must know (`deployment_facts()`:
label names, the tokenizer); the task says what its outputs' agreement means (`compare_outputs`: per-label
decisions for multi-label, argmax otherwise). Export traces the net on the examples with those names and axes, and
onnxruntime must match the net twice: on the examples as given and with every dynamic axis but the batch cut to half
(a second length), so a graph frozen to one length cannot pass. Every file carries the facts, the task's decisions
(a threshold) and the provenance in its metadata.

int8: onnxruntime dynamic int8 (no calibration) is built and its agreement printed; static QDQ needs calibration
batches of image data and torchao's int8 skips what is not `nn.Linear`, so each says in one line why it is not built
or what it left in float.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from pytorch_lightning import LightningDataModule
from torch import Tensor, nn

from litforge.callbacks.qat import convert_int8, save_int8_model
from litforge.config.settings import Export, job_settings
from litforge.core.contracts import (
    DataModule,
    DeclaresInputs,
    ExampleInput,
    ExportTask,
    ImageExportData,
    lacks,
    missing_members,
)
from litforge.deploy.metadata import decision_props, provenance_props, write_metadata
from litforge.deploy.onnx import Compare, comparison, export_onnx, judge_parity, ort_session
from litforge.deploy.quantize import preprocess_for_quantization, quantize_onnx_dynamic

OUTPUT = "outputs"  # the graph's output name


def second_length(inputs: list[ExampleInput]) -> list[ExampleInput]:
    """The examples with every dynamic axis but the batch (axis 0) cut to half its size (at least 1)."""
    sizes = {n: max(1, i.example.shape[a] // 2) for i in inputs for a, n in i.dynamic_axes.items() if a}
    cut = lambda i: tuple(  # noqa: E731
        slice(0, sizes[i.dynamic_axes[a]]) if a and a in i.dynamic_axes else slice(None) for a in range(i.example.ndim)
    )
    return [ExampleInput(i.name, i.example[cut(i)].contiguous(), i.dynamic_axes) for i in inputs]


def shape_of(i: ExampleInput) -> str:
    return "x".join(str(s) for s in i.example.shape)


def run_parity(
    path: Path, net: nn.Module, inputs: list[ExampleInput], compare: Compare
) -> tuple[dict[str, float], Tensor]:
    """(the task's figures of onnxruntime's outputs against the net's, onnxruntime's outputs) on `inputs`."""
    with torch.inference_mode():
        ref = net(*(i.example for i in inputs)).float()
    out = torch.as_tensor(ort_session(path).run(None, {i.name: i.example.numpy() for i in inputs})[0])
    return compare(ref, out), out


def declared_metadata(
    task: ExportTask, inputs: list[ExampleInput], facts: dict[str, str], ckpt: Path, checkpoint: dict[str, Any]
) -> dict[str, str]:
    shapes = [
        {"name": i.name, "dtype": str(i.example.dtype).removeprefix("torch."),
         "shape": [i.dynamic_axes.get(a, s) for a, s in enumerate(i.example.shape)]}
        for i in inputs
    ]  # fmt: skip
    return {
        "input_name": inputs[0].name,
        "inputs": json.dumps(shapes),
        "output_name": OUTPUT,
        **facts,
        "task": type(task).__module__.rsplit(".", 1)[-1],
        **decision_props(task),
        **provenance_props(ckpt, checkpoint),
    }


def declared_inputs(datamodule: LightningDataModule) -> tuple[list[ExampleInput], dict[str, str]]:
    """(the deployed graph's inputs, the deployer's facts): as the datamodule declares them, or else its whole test
    split as its test loader and `on_after_batch_transfer` hand it to the task, as one `features` input."""
    if isinstance(datamodule, DeclaresInputs):
        return datamodule.example_inputs(), datamodule.deployment_facts()
    if isinstance(datamodule, DataModule) and datamodule.kind == "image":  # an earlier guide's: no normalize
        warnings.warn(
            f"image data `{type(datamodule).__name__}` lacks {lacks(missing_members(datamodule, ImageExportData))}: "
            "export takes its test loader's inputs as they are, with no normalisation in the graph; declare the "
            "inputs (`example_inputs()`, `deployment_facts()`: litforge.DeclaresInputs) before this default goes",
            DeprecationWarning,
            stacklevel=2,
        )
    datamodule.setup("test")
    batches = [datamodule.on_after_batch_transfer(b, 0) for b in datamodule.test_dataloader()]
    x = torch.cat([b[0] if isinstance(b, (tuple, list)) else b for b in batches])  # in the loader's dtype
    note = "none in the graph: inputs as the datamodule's on_after_batch_transfer gives them"
    return [ExampleInput("features", x, {0: "batch"})], {"normalization": note}


def export_declared(
    cfg: DictConfig, task: ExportTask, datamodule: LightningDataModule, net: nn.Module, checkpoint: dict[str, Any]
) -> dict[str, Any]:
    """ONNX of the net on the declared inputs, parity-checked at two lengths where a length varies; int8 variants."""
    settings = job_settings(cfg, Export)  # the export job's own keys, typed
    ckpt, out_dir = Path(str(settings.ckpt_path)), Path(settings.paths.output_dir)
    (inputs, facts), compare = declared_inputs(datamodule), comparison(task)
    path = export_onnx(net, inputs, out_dir / "model.onnx", opset=settings.opset, names=(inputs[0].name, OUTPUT))
    props = declared_metadata(task, inputs, facts, ckpt, checkpoint)
    write_metadata(path, props, variant="fp32")
    metrics: dict[str, float] = {}
    lengths = any(axis for i in inputs for axis in i.dynamic_axes)  # a dynamic axis besides the batch
    for feed in (inputs, second_length(inputs)) if lengths else (inputs,):
        on = f"{', '.join(f'{i.name} {shape_of(i)}' for i in feed)}"
        figures = judge_parity(
            *run_parity(path, net, feed, compare), settings.parity.atol, settings.parity.min_agreement, on
        )
        metrics |= {f"onnx/{k}@{shape_of(feed[0])}": v for k, v in figures.items()}
    written = [path]
    quantize = [str(q) for q in ([settings.quantize] if isinstance(settings.quantize, str) else settings.quantize)]
    if "onnx_dynamic" in quantize:
        pre = preprocess_for_quantization(path, out_dir / "model.pre.onnx")
        written.append(int8 := quantize_onnx_dynamic(pre, out_dir))
        pre.unlink(missing_ok=True)
        write_metadata(int8, props, variant="int8 dynamic")
        figures, _ = run_parity(int8, net, inputs, compare)
        metrics |= {f"int8_dynamic/{k}": v for k, v in figures.items()}
        print(f"int8 dynamic (onnxruntime): agreement with the net {figures['agreement']:.2%}, max |diff| "
              f"{figures['max_abs_diff']:.2e} on {shape_of(inputs[0])}")  # fmt: skip
    if "onnx_static" in quantize:
        print("note: int8 static QDQ not built: it calibrates on image batches of the training split; "
              "quantize=[onnx_dynamic] is this model's int8 variant")  # fmt: skip
    if "torchao_dynamic" in quantize and isinstance(task, pl.LightningModule):
        module = convert_int8(net)
        floats = sorted({type(m).__name__ for m in module.modules() if not list(m.children()) and m.state_dict()}
                        - {"Linear"})  # fmt: skip
        written.append(save_int8_model(module, task, out_dir / "model_int8_torchao.pt"))
        print(
            f"torchao int8 dynamic: nn.Linear layers in int8{'; left in float: ' + ', '.join(floats) if floats else ''}"
        )
    result = {
        "metrics": metrics,
        "checkpoint": str(ckpt),
        "onnx": str(path),
        "output_dir": str(out_dir),
        "written": [str(p) for p in written],
    }
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=2, default=str))
    return result
