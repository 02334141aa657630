"""The prediction job: run a checkpoint on new inputs (an image, a folder of images, a table for `data=csv`, or any
file the datamodule's `read_inputs` reads) or on its test split; write a CSV with one row per input.

The rows are the task's (litforge.core.contracts.WritesPredictions: `prediction_rows`, and `answer_columns` beside
the test split's rows), so this job holds no task-specific columns; its summary compares every answer column with
the prediction it answers. What the task and the datamodule need is checked right after they are rebuilt from the
checkpoint (check_predictable), and the rows on the first batch (check_rows): a missing member or a wrong return
type is one line naming it, not a KeyError after the work.
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from pytorch_lightning import LightningDataModule

from litforge.config.settings import Predict, job_settings
from litforge.core.contracts import (
    ArraySplits,
    FileSplits,
    ImageInputs,
    InputReader,
    check_predictable,
    check_rows,
    defines_own,
)
from litforge.core.errors import ConfigError
from litforge.data.images import find_images, load_image_tensor
from litforge.jobs.checks import check_at_start
from litforge.tasks.restore import inference_device, load_for_inference

Row = dict[str, str | int | float]


def predict(cfg: DictConfig) -> dict[str, Any]:
    check_at_start(cfg, "predict")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Predict)  # the job's own keys, typed
    task, datamodule, _ = load_for_inference(cfg)
    task.set_decisions(cfg.task, "predict")  # task.threshold=0.3: a decision of the task (its `decisions`)
    where = f"ckpt_path={settings.ckpt_path}"
    check_predictable(task, datamodule, settings.input or None, where)
    step = task.predict_step if defines_own(task, "predict_step") else forward_step(task)
    device = inference_device(settings.device)
    task.to(device)
    rows: list[Row] = []
    with torch.inference_mode():
        for names, inputs, targets in batches(settings, datamodule):
            out = task.prediction_rows(step(inputs.to(device), 0))
            if not rows:  # the first batch: rows of the declared type (litforge.WritesPredictions)
                check_rows(task, "prediction_rows", out, len(names), where)
            for i, row in enumerate(out):
                answer = {} if targets is None else task.answer_columns(targets[i])
                if not rows and i == 0 and targets is not None:
                    check_rows(task, "answer_columns", answer, None, where)
                rows.append({"input": names[i], **row, **answer})
    output = predictions_file(settings.output, Path(settings.paths.output_dir))
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    metrics = {"predictions": len(rows), **summary(rows)}  # a count, shown as one
    return {"metrics": metrics, "written": str(output), "output_dir": str(settings.paths.output_dir)}


def forward_step(task: torch.nn.Module) -> Any:
    """The step of a task without a `predict_step` of its own (the shape an earlier guide taught): its forward
    output as `predicted`, one column per value; deprecated, since a task's own step says what its outputs mean."""
    warnings.warn(
        f"task `{type(task).__name__}` has no predict_step of its own: predict writes its forward output as "
        "`predicted`; define `predict_step(batch, batch_idx)` returning {'predicted': ...} (litforge.PredictTask) "
        "before this default goes",
        DeprecationWarning,
        stacklevel=2,
    )
    return lambda inputs, _: {"predicted": task(inputs).float()}


def summary(rows: list[Row]) -> dict[str, float]:
    """Each answer column against the prediction it answers (`true_<name>` answers `<name>`, `label` answers
    `predicted`): `mae` over the float columns, `accuracy` (exact agreement) over the others."""
    pairs = [(k[5:], k) for k in (rows[0] if rows else {}) if k.startswith("true_") and k[5:] in rows[0]]
    pairs += [("predicted", "label")] if rows and {"predicted", "label"} <= set(rows[0]) else []
    numeric = [p for p in pairs if all(isinstance(r[k], float) for r in rows for k in p)]
    exact = [p for p in pairs if p not in numeric]
    metrics: dict[str, float] = {}
    if numeric:
        metrics["mae"] = sum(abs(float(r[a]) - float(r[b])) for r in rows for a, b in numeric) / (
            len(rows) * len(numeric)
        )
    if exact:
        metrics["accuracy"] = sum(all(r[a] == r[b] for a, b in exact) for r in rows) / len(rows)
    return metrics


def predictions_file(output: str | None, run_dir: Path) -> Path:
    """`output=` as meant: a file, or a folder (one that exists, or a path ending in `/`) that gets predictions.csv;
    null: the run folder's predictions.csv."""
    if not output:
        return run_dir / "predictions.csv"
    path = Path(str(output))
    return path / "predictions.csv" if path.is_dir() or str(output).endswith(("/", "\\")) else path


def batches(settings: Predict, datamodule: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """(row names, inputs as the task takes them, targets or None) per batch of `batch_size`: normalised where the
    datamodule normalises (images, tables), as `read_inputs` gives them otherwise (token ids)."""
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
    normalizes = isinstance(datamodule, (ArraySplits, ImageInputs))
    for start in range(0, len(raw), size):
        chunk = datamodule.normalize(raw[start : start + size]) if normalizes else raw[start : start + size]
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
