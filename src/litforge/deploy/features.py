"""Exporting a model of table rows (`data=csv`), or of any data that is not images (a user's own datamodule).

Any such datamodule: the graph is the net as it is, taking inputs as the datamodule's `on_after_batch_transfer` gives
them to the task; the parity check runs on its test loader's batches. The metadata says so.

`data=csv`: the graph takes the encoded feature vector and standardises inside.

The exported graph's input `features` is the row as the datamodule encodes it before standardisation (numbers as
they are, NaN where missing; text columns one-hot, litforge.data.tabular): missing values become the training mean
and every column is standardised in the graph, with the very ops training used, so a deployer cannot forget or
mistype the statistics. The metadata names every input column and records the statistics and the outputs (class
names, or the targets' names).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from pytorch_lightning import LightningDataModule
from torch import Tensor, nn

from litforge.config.settings import Export, job_settings
from litforge.core.contracts import DataModule, ExportTask, ImageExportData, StandardizedRows, lacks, missing_members
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


def test_inputs(datamodule: LightningDataModule) -> Tensor:
    """The whole test split's inputs, batch by batch through the datamodule's own per-batch transform."""
    datamodule.setup("test")
    inputs = []
    for batch in datamodule.test_dataloader():
        batch = datamodule.on_after_batch_transfer(batch, 0)
        inputs.append((batch[0] if isinstance(batch, (tuple, list)) else batch).float())
    return torch.cat(inputs)


def plain_metadata(task: ExportTask, x: Tensor, ckpt: Path, checkpoint: dict[str, Any]) -> dict[str, str]:
    names = task.feature_names or task.hparams.get("feature_names")
    return {
        "input_name": NAMES[0],
        "input_shape": json.dumps(["batch", *x.shape[1:]]),
        "input_dtype": "float32",
        **({"feature_names": json.dumps(list(names))} if names else {}),
        "normalization": "none in the graph: inputs as the datamodule's on_after_batch_transfer gives them",
        "output_name": NAMES[1],
        "task": type(task).__module__,
        **provenance_props(ckpt, checkpoint),
    }


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
    cfg: DictConfig, task: ExportTask, datamodule: LightningDataModule, net: nn.Module, checkpoint: dict[str, Any]
) -> dict[str, Any]:
    """ONNX of a model of rows, parity-checked with onnxruntime on the test split (int8 variants are for image nets)."""
    settings = job_settings(cfg, Export)  # the export job's own keys, typed
    ckpt, out_dir = Path(str(settings.ckpt_path)), Path(settings.paths.output_dir)
    if isinstance(datamodule, StandardizedRows):  # data=csv: raw encoded rows in, standardised inside
        x_test, _ = datamodule.split_arrays("test")
        mean, std = datamodule.standardization()
        deployed: nn.Module = StandardizedFeatures(net, mean, std).eval()
        with torch.inference_mode():
            ref = batched(lambda b: net(datamodule.normalize(b)), x_test)
        props = features_metadata(task, datamodule, mean, std, ckpt, checkpoint)
    else:  # a datamodule of the user's own: the inputs its test loader hands the task
        if (
            isinstance(datamodule, DataModule) and datamodule.kind == "image"
        ):  # the shape an earlier guide taught: no statistics for the graph
            missing = lacks(missing_members(datamodule, ImageExportData))
            warnings.warn(
                f"image data `{type(datamodule).__name__}` lacks {missing}: "
                "export takes its test loader's inputs as they are, with no normalisation in the graph; declare the "
                "inputs with `example_inputs()` and `deployment_facts()` (litforge.DeclaresInputs) before this "
                "default goes",
                DeprecationWarning,
                stacklevel=2,
            )
        x_test = test_inputs(datamodule)
        deployed = net
        with torch.inference_mode():
            ref = batched(net, x_test)
        props = plain_metadata(task, x_test, ckpt, checkpoint)
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
