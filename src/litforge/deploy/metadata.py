"""What a deployer needs to know about an exported model, written into the ONNX file's own `metadata_props`.

Why in the file: a model shipped without its config is only usable if the file says how to feed it and how to read
its output. Every `.onnx` the export job writes (fp32 and the int8 variants) carries the same keys, readable with
onnxruntime alone (`session.get_modelmeta().custom_metadata_map`); list values are JSON:

- `input_name`, `output_name` ("logits", one row of class scores per image), `input_layout` ("NCHW"),
  `input_dtype` ("float32" or "uint8"), `input_range` ("[0, 1]" / "[0, 255]"),
  `input_channels`, `input_size` ([height, width]), `color_mode` (Pillow's "L" or "RGB"), `resize` ("bilinear"),
  `normalization` ("in-graph") with `mean` / `std` for the record, `class_names`;
- `litforge_version`, `git_commit`, `git_dirty` (the checkpoint's own provenance record, else the run's
  provenance.json), `task`, `source_checkpoint` (the checkpoint's file name), and `variant` (which file this is).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from litforge import __version__
from litforge.core.contracts import DecidingTask
from litforge.records.provenance import CHECKPOINT_KEY
from litforge.records.provenance import FILE as PROVENANCE_FILE

COLOR_MODES = {1: "L", 3: "RGB"}  # channels → the Pillow mode training converted images to (litforge.data.images)


def code_origin(ckpt_path: Path, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """{"commit", "dirty"} of the code that trained the checkpoint: the record inside the checkpoint
    (`litforge_provenance`, which travels with the file), else the run folder's provenance.json
    (`<run>/checkpoints/<x>.ckpt` → `<run>/provenance.json`), else unknown (None)."""
    origin = checkpoint.get(CHECKPOINT_KEY) or {}
    if origin.get("commit"):
        return {"commit": origin["commit"], "dirty": origin.get("dirty")}
    record = ckpt_path.resolve().parent.parent / PROVENANCE_FILE
    if record.is_file():
        try:
            git = json.loads(record.read_text()).get("git") or {}
            if git.get("commit"):
                return {"commit": git["commit"], "dirty": git.get("dirty")}
        except (OSError, json.JSONDecodeError, AttributeError):
            pass
    return {"commit": None, "dirty": None}


def deployment_metadata(
    input_shape: list[int],
    class_names: list[str],
    mean: list[float],
    std: list[float],
    input_dtype: str,
    ckpt_path: Path,
    checkpoint: dict[str, Any],
    task: str = "classification",
) -> dict[str, str]:
    """The metadata_props of every exported file (all values strings, as ONNX stores them)."""
    channels, height, width = (int(v) for v in input_shape)
    return {
        "input_name": "images",
        "input_layout": "NCHW",
        "input_dtype": input_dtype,
        "input_range": "[0, 255]" if input_dtype == "uint8" else "[0, 1]",
        "input_channels": str(channels),
        "input_size": json.dumps([height, width]),
        "color_mode": COLOR_MODES.get(channels, f"{channels} channels"),
        "resize": "bilinear",
        "normalization": "in-graph",
        "mean": json.dumps([float(v) for v in mean]),
        "std": json.dumps([float(v) for v in std]),
        "class_names": json.dumps([str(c) for c in class_names]),
        "output_name": "logits",
        "task": task,
        **provenance_props(ckpt_path, checkpoint),
    }


def decision_props(task: DecidingTask) -> dict[str, str]:
    """The task's decisions as export applied them (`task.threshold=0.3`): a deployer applies them to the outputs."""
    return {"decisions": json.dumps(task.decision_values())}


def provenance_props(ckpt_path: Path, checkpoint: dict[str, Any]) -> dict[str, str]:
    """Where an exported file came from, the same keys in every export (images, tables, a user's data): the
    litforge version, the training code's commit and dirty flag, and the checkpoint's name."""
    origin = code_origin(ckpt_path, checkpoint)
    return {
        "litforge_version": __version__,
        "git_commit": str(origin["commit"]) if origin["commit"] else "unknown",
        "git_dirty": "unknown" if origin["dirty"] is None else str(bool(origin["dirty"])).lower(),
        "source_checkpoint": ckpt_path.name,  # the name only: an absolute path leaks the build machine
    }


def write_metadata(path: Path, props: dict[str, str], variant: str) -> None:
    """Replace the file's metadata_props with `props` + `variant`; external weight data is left where it is."""
    import onnx  # extra [deploy]

    model = onnx.load(str(path), load_external_data=False)
    del model.metadata_props[:]
    for key, value in {**props, "variant": variant}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
