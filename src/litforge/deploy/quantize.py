"""Post-training int8 variants of an exported net, and a QAT run's own int8 model, for the compression report.

Why three quantizers: on a CPU each wins somewhere else (measured here: onnxruntime static QDQ int8 ran a ResNet-18
3.2x faster than fp32 at batch 1; dynamic int8 was slower on convolutions but faster on a transformer; torchao int8
stays in PyTorch but is slow in eager mode), so the export job builds each one asked for and the report measures
them side by side on the machine at hand.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from litforge.callbacks.qat import INT8_FILENAME, convert_int8, int8_source, load_int8_model, save_int8_model
from litforge.core.contracts import ArraySplits

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from torch import nn


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime's quantizer logs every tensor at INFO on the root logger (which a Hydra job sets to INFO)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.setLevel(level)


# ---- torchao -----------------------------------------------------------------------------------------------------
def torchao_dynamic(net: nn.Module, task: pl.LightningModule, path: Path) -> tuple[nn.Module, Path]:
    """torchao dynamic int8 of the PyTorch net (the QAT callback's conversion, on a never-prepared net), saved as
    the QAT callback saves its int8 model; returns (module, file)."""
    module = convert_int8(net)
    return module, save_int8_model(module, task, path)


def qat_int8_model(ckpt_path: Path) -> tuple[Any, Path] | None:
    """A QAT run's `model_int8.pt` beside the checkpoint, as (module, file), if it was converted from this checkpoint.

    One converted from another checkpoint of the run (the best, say, while `last.ckpt` is exported) would not be
    comparable: it is left out with a note naming the checkpoint to export instead.
    """
    file = ckpt_path.parent / INT8_FILENAME
    if not file.is_file():
        return None
    source = int8_source(file)
    if source != ckpt_path.name:
        print(
            f"note: {file.name} was converted from {source}, not {ckpt_path.name}: export "
            f"ckpt_path={ckpt_path.parent / str(source)} to compare with the QAT int8 model"
        )
        return None
    return load_int8_model(file), file


# ---- onnxruntime -------------------------------------------------------------------------------------------------
def preprocess_for_quantization(onnx_path: Path, out: Path) -> Path:
    """onnxruntime's pre-processing (shape inference, graph optimisation) before quantizing.

    Symbolic shape inference is skipped: it fails on the dynamo exporter's graphs, and ONNX shape inference suffices.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process  # extra [deploy]

    with _quiet_root_logger():
        quant_pre_process(str(onnx_path), str(out), skip_symbolic_shape=True)
    return out


def quantize_onnx_dynamic(pre: Path, out_dir: Path) -> Path:
    """Dynamic int8: int8 per-channel weights, activation ranges computed at run time (no calibration)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # extra [deploy]

    out = out_dir / "model_int8_dynamic.onnx"
    with _quiet_root_logger():
        quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8, per_channel=True)
    return out


def calibration_batches(
    datamodule: ArraySplits, size: int, batch_size: int, seed: int, prepare: Callable[[Any], Any] | None = None
) -> list[Any]:
    """A seeded random subset of the training split for static quantization, in the form the graph takes:
    `prepare(raw images)` (the export job: the deployed input, normalisation in the graph), by default normalised
    like training (a bare net, as benchmarks/inference.py exports)."""
    images, _ = datamodule.split_arrays("train")
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:size]
    x = (prepare or (lambda b: datamodule.normalize(b).float()))(images[order])
    return [x[i : i + batch_size] for i in range(0, len(x), batch_size)]


def quantize_onnx_static(pre: Path, out_dir: Path, batches: list[Any]) -> Path:
    """QDQ int8 (per-channel int8 weights, uint8 activations) with ranges calibrated on `batches`."""
    from onnxruntime.quantization import (  # extra [deploy]
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"images": b.numpy()} for b in batches])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.items, None)

    out = out_dir / "model_int8_static.onnx"
    with _quiet_root_logger():
        quantize_static(
            str(pre),
            str(out),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    return out
