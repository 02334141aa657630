"""The prediction job: run a checkpoint on new inputs (an image, a folder of images, or a CSV/Parquet table for
`data=csv`) or on its test split; write a CSV with one row per input: the class (and its confidence) or the values.

Works on any task whose `predict_step` returns `predicted` (and, for classes, `confidence`), and on a user's own
datamodule: without `split_arrays` its test loader is read batch by batch. What the task and the datamodule need is
the contract in litforge.core.contracts (PredictTask, InputReader, ImageInputs, ArraySplits), checked right after
they are rebuilt from the checkpoint, so a missing member is one line naming it, not a KeyError after the work.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig

from litforge.config.settings import Predict, job_settings
from litforge.core.contracts import (
    ArraySplits,
    FileSplits,
    InputReader,
    PredictTask,
    check_predictable,
    check_prediction,
)
from litforge.core.errors import ConfigError
from litforge.data.images import find_images, load_image_tensor
from litforge.jobs.checks import check_at_start
from litforge.tasks.restore import inference_device, load_for_inference

if TYPE_CHECKING:
    from pytorch_lightning import LightningDataModule
    from torch import Tensor


def predict(cfg: DictConfig) -> dict[str, Any]:
    check_at_start(cfg, "predict")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Predict)  # the job's own keys, typed
    task, datamodule, _ = load_for_inference(cfg)
    task.set_decisions(cfg.task, "predict")  # task.threshold=0.3: a decision of the task (its `decisions`)
    where = f"ckpt_path={settings.ckpt_path}"
    check_predictable(task, datamodule, settings.input or None, where)
    device = inference_device(settings.device)
    task.to(device)
    rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        for names, inputs, targets in batches(settings, datamodule):
            out = task.predict_step(inputs.to(device), 0)
            if not rows:
                check_prediction(task, out, where)
            for i, row in enumerate(prediction_rows(task, out)):
                if targets is not None:
                    row.update(true_values(task, targets[i]))
                rows.append({"input": names[i], **row})
    output = predictions_file(settings.output, Path(settings.paths.output_dir))
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    metrics: dict[str, float | int] = {"predictions": len(rows)}  # a count, shown as one
    if rows and "label" in rows[0]:
        metrics["accuracy"] = sum(r["predicted"] == r["label"] for r in rows) / len(rows)
    true = [k for k in (rows[0] if rows else {}) if k.startswith("true_")]
    if true:
        errors = [abs(float(r[k[len("true_") :]]) - float(r[k])) for r in rows for k in true]
        metrics["mae"] = sum(errors) / len(errors)
    return {"metrics": metrics, "written": str(output), "output_dir": str(settings.paths.output_dir)}


def predictions_file(output: str | None, run_dir: Path) -> Path:
    """`output=` as meant: a file, or a folder (one that exists, or a path ending in `/`) that gets predictions.csv;
    null: the run folder's predictions.csv."""
    if not output:
        return run_dir / "predictions.csv"
    path = Path(str(output))
    return path / "predictions.csv" if path.is_dir() or str(output).endswith(("/", "\\")) else path


def batches(settings: Predict, datamodule: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """(row names, normalised inputs, targets or None) per batch of `batch_size`."""
    size = settings.batch_size
    if settings.input:
        names, raw = read_inputs(settings.input, datamodule)
        targets = None
    elif isinstance(datamodule, ArraySplits):
        raw, targets = datamodule.split_arrays("test")
        if isinstance(datamodule, FileSplits):  # data read from files (image_folder): name each row by its file
            names = [path for path, _ in datamodule.split_samples("test")]
        else:
            names = [f"test[{i}]" for i in range(len(raw))]
    else:  # a datamodule of the user's own: its test loader, through its own per-batch transform
        yield from loader_batches(datamodule)
        return
    for start in range(0, len(raw), size):
        chunk = datamodule.normalize(raw[start : start + size])
        yield names[start : start + size], chunk, None if targets is None else targets[start : start + size]


def read_inputs(path: str, datamodule: Any) -> tuple[list[str], Any]:
    """The rows of a table (datamodules with `read_inputs`, e.g. data=csv) or the images of a file or folder."""
    if isinstance(datamodule, InputReader):
        try:
            return datamodule.read_inputs(path)
        except ConfigError as exc:  # a table reader names the training table's key; this file is input=
            raise ConfigError(str(exc).replace(f"data.path={path}", f"input={path}")) from None
    files = find_images(path)  # for a folder: the files data=image_folder would train on
    channels, height, width = datamodule.input_shape
    datamodule.ensure_stats()
    return [str(f) for f in files], torch.stack(
        [load_image_tensor(f, channels, (height, width), datamodule.decoder) for f in files]
    )


def loader_batches(datamodule: LightningDataModule) -> Iterator[tuple[list[str], Any, Any]]:
    datamodule.setup("test")
    seen = 0
    for batch in datamodule.test_dataloader():
        batch = datamodule.on_after_batch_transfer(batch, 0)
        inputs, targets = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) else (batch, None)
        yield [f"test[{seen + i}]" for i in range(len(inputs))], inputs, targets
        seen += len(inputs)


def prediction_rows(task: PredictTask, out: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV row per sample: `predicted`, `class_name`, `confidence` for classes; one column per target for values."""
    predicted = out["predicted"]
    if "confidence" in out:
        names = task.class_names
        return [  # a negative index: no class (the task abstained, e.g. below task.threshold)
            {"predicted": p, **({"class_name": names[p] if p >= 0 else ""} if names else {}), "confidence": round(c, 6)}
            for p, c in zip(predicted.tolist(), out["confidence"].tolist(), strict=True)
        ]
    values = predicted.reshape(len(predicted), -1).tolist()
    columns = task.target_names or [f"predicted_{i}" for i in range(len(values[0]))]
    return [{name: round(v, 6) for name, v in zip(columns, row, strict=True)} for row in values]


def true_values(task: PredictTask, target: Tensor) -> dict[str, Any]:
    """The known answer beside a prediction of the test split: `label`, or `true_<target>` per value."""
    if target.ndim == 0 and not target.is_floating_point():
        return {"label": int(target)}
    columns = task.target_names or [f"predicted_{i}" for i in range(target.numel())]
    return {f"true_{name}": round(float(v), 6) for name, v in zip(columns, target.reshape(-1).tolist(), strict=True)}
