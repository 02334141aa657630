"""Exporting a model of table rows (`data=csv`): the graph takes the encoded feature vector and standardises inside.

The exported graph's input `features` is the row as the datamodule encodes it before standardisation (numbers as
they are, NaN where missing; text columns one-hot, litforge.data.tabular): missing values become the training mean
and every column is standardised in the graph, with the very ops training used, so a deployer cannot forget or
mistype the statistics. The metadata names every input column and records the statistics and the outputs (class
names, or the targets' names).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from litforge.config.settings import Export, job_settings
from litforge.core.contracts import ExportTask, StandardizedRows
from litforge.data.tabular import standardize
from litforge.deploy.metadata import decision_props, provenance_props, write_metadata
from litforge.deploy.net import batched
from litforge.deploy.onnx import check_parity, comparison, export_onnx

NAMES = ("features", "outputs")  # the graph's input and output names


class StandardizedFeatures(nn.Module):
    """`net` behind the training standardisation of encoded rows (missing numbers as NaN)."""

    mean: Tensor  # buffers (registered in __init__)
    std: Tensor

    def __init__(self, net: nn.Module, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1))

    def forward(self, features: Tensor) -> Tensor:
        return self.net(standardize(features, self.mean, self.std))


def features_metadata(
    task: ExportTask,
    datamodule: StandardizedRows,
    mean: list[float],
    std: list[float],
    ckpt: Path,
    checkpoint: dict[str, Any],
) -> dict[str, str]:
    classes = task.class_names
    return {
        "input_name": NAMES[0],
        "input_layout": "[batch, features]",
        "input_dtype": "float32",
        "feature_names": json.dumps(list(datamodule.feature_names)),
        "missing_values": "NaN (replaced by the training mean in the graph)",
        "normalization": "in-graph",
        "mean": json.dumps(mean),
        "std": json.dumps(std),
        "encoding": json.dumps(datamodule.encoding),
        "output_name": NAMES[1],
        "outputs": "logits" if classes else "values",
        **({"class_names": json.dumps(list(classes))} if classes else {}),
        **({} if classes else {"target_names": json.dumps(list(task.target_names or []))}),
        "task": type(task).__module__.rsplit(".", 1)[-1],
        **provenance_props(ckpt, checkpoint),
    }


def export_features(
    cfg: DictConfig, task: ExportTask, datamodule: StandardizedRows, net: nn.Module, checkpoint: dict[str, Any]
) -> dict[str, Any]:
    """ONNX of a model of rows, parity-checked with onnxruntime on the test split (int8 variants are for image nets)."""
    settings = job_settings(cfg, Export)  # the export job's own keys, typed
    ckpt, out_dir = Path(str(settings.ckpt_path)), Path(settings.paths.output_dir)
    x_test, _ = datamodule.split_arrays("test")  # raw encoded rows in, standardised inside
    mean, std = datamodule.standardization()
    deployed = StandardizedFeatures(net, mean, std).eval()
    with torch.inference_mode():
        ref = batched(lambda b: net(datamodule.normalize(b)), x_test)
    props = features_metadata(task, datamodule, mean, std, ckpt, checkpoint)
    path = export_onnx(deployed, x_test[:2].contiguous(), out_dir / "model.onnx", opset=settings.opset, names=NAMES)
    write_metadata(path, props | decision_props(task), variant="fp32")
    parity = check_parity(
        path,
        x_test,
        ref,
        atol=settings.parity.atol,
        min_agreement=settings.parity.min_agreement,
        input_name=NAMES[0],
        what="rows",
        compare=comparison(task),
    )
    result = {
        "metrics": {"onnx/max_abs_diff": parity["max_abs_diff"], "onnx/argmax_agreement": parity["agreement"]},
        "checkpoint": str(ckpt),
        "onnx": str(path),
        "output_dir": str(out_dir),
        "written": [str(path)],
    }
    (out_dir / "metrics.json").write_text(json.dumps(result, indent=2, default=str))
    return result
