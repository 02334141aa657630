"""A self-contained ONNX deployment (issue 15): `examples/classify_onnx.py`, with only onnxruntime, numpy and Pillow,
classifies JPEGs exactly as `predict.py` does, reading everything it needs from the exported file's metadata."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TINY, make_image_folder

EXAMPLE = ROOT / "examples" / "classify_onnx.py"

# runs a script in a process where importing torch or litforge raises ImportError (before anything else is imported)
BOOTSTRAP = """
import runpy, sys
BLOCKED = {"torch", "litforge"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this process")
        return None
sys.meta_path.insert(0, Block())
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("the import blocker did not block torch")
script, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
assert not loaded, loaded
"""


def write_jpegs(folder: Path) -> list[Path]:
    """New photos, none from the training set: RGB and grey JPEGs of other sizes, across the brightness classes."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    files = []
    for i, (level, size, mode) in enumerate(
        [
            (40, (20, 14), "RGB"),
            (120, (8, 8), "RGB"),
            (200, (30, 30), "L"),
            (80, (16, 24), "RGB"),
            (160, (11, 9), "L"),
            (230, (8, 8), "RGB"),
        ]
    ):
        channels = 3 if mode == "RGB" else 1
        pixels = np.clip(rng.normal(level, 25, size=(size[1], size[0], channels)), 0, 255).astype("uint8")
        path = folder / f"photo_{i}.jpg"
        Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode=mode).save(path, quality=90)
        files.append(path)
    return files


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A tiny RGB image_folder classifier trained in-process, exported with its default uint8 input."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (the ${uid:} resolver)
    from litforge.jobs.export import export
    from litforge.jobs.train import train

    tmp = tmp_path_factory.mktemp("onnx_deploy")
    root = make_image_folder(tmp / "images", classes=("dark", "mid", "light"), per_class=10, size=(12, 12), mode="RGB")

    def cfg(name: str, *overrides: str, out: str | None = None):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name=name, overrides=[f"paths.output_dir={tmp / (out or name)}", *overrides])

    checkpoint = train(
        cfg(
            "train",
            "data=image_folder",
            f"data.root={root}",
            "data.image_size=8",
            "data.batch_size=8",
            "model=mlp",
            *TINY,
            "test_after_training=false",
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            "logger=csv",
        )
    )["best_checkpoint"]
    export(
        cfg(
            "export",
            f"ckpt_path={checkpoint}",
            "quantize=[onnx_dynamic]",
            "report.batch_sizes=[1]",
            "report.threads=[1]",
            "report.rounds=1",
        )
    )
    files = write_jpegs(tmp / "photos")
    from litforge.jobs.predict import predict

    out_csv = tmp / "predictions.csv"
    predict(cfg("predict", f"ckpt_path={checkpoint}", f"input={files[0].parent}", f"output={out_csv}"))
    with out_csv.open() as handle:
        predicted = {Path(row["input"]).name: row["class_name"] for row in csv.DictReader(handle)}

    def export_float():  # called by the test that needs it: the export takes a while
        return export(
            cfg(
                "export",
                f"ckpt_path={checkpoint}",
                "input_dtype=float32",
                "quantize=[]",
                "report.batch_sizes=[1]",
                "report.threads=[1]",
                "report.rounds=1",
                out="export_float",
            )
        )

    GlobalHydra.instance().clear()
    return {
        "checkpoint": Path(checkpoint),
        "out": tmp / "export",
        "tmp": tmp,
        "files": files,
        "predicted": predicted,
        "export_float": export_float,
    }


def classify(model: Path, files: list[Path], cwd: Path) -> dict[str, str]:
    """{file name: class} as examples/classify_onnx.py prints them, run where torch and litforge cannot be imported."""
    result = subprocess.run(
        [sys.executable, "-I", "-c", BOOTSTRAP, str(EXAMPLE), str(model), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {Path(path).name: name for path, name in (line.rsplit(" ", 1) for line in result.stdout.splitlines())}


def test_the_example_classifies_jpegs_like_predict_without_torch_or_litforge(exported: dict):
    expected = exported["predicted"]
    assert len(expected) == len(exported["files"]) and len(set(expected.values())) >= 2  # not one class for all
    assert classify(exported["out"] / "model.onnx", exported["files"], exported["tmp"]) == expected
    # int8 may flip a borderline image; it must still be fed from the same metadata and name the known classes
    int8 = classify(exported["out"] / "model_int8_dynamic.onnx", exported["files"], exported["tmp"])
    assert int8.keys() == expected.keys() and set(int8.values()) <= {"dark", "mid", "light"}


def test_a_float32_export_takes_unit_range_pixels_and_the_example_follows(exported: dict):
    import onnxruntime as ort
    from hydra.core.global_hydra import GlobalHydra

    result = exported["export_float"]()
    GlobalHydra.instance().clear()
    assert result["metrics"]["onnx/max_abs_diff"] <= 1e-4
    model = Path(result["onnx"])
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert session.get_inputs()[0].type == "tensor(float)"
    assert (meta["input_dtype"], meta["input_range"]) == ("float32", "[0, 1]")
    assert classify(model, exported["files"], exported["tmp"]) == exported["predicted"]


def test_every_exported_file_states_what_a_deployer_needs(exported: dict):
    import onnxruntime as ort

    from litforge import __version__
    from litforge.checkpointing.load import load_checkpoint
    from litforge.records.provenance import CHECKPOINT_KEY

    origin = load_checkpoint(str(exported["checkpoint"]))[CHECKPOINT_KEY]
    for model, variant in (("model.onnx", "fp32"), ("model_int8_dynamic.onnx", "int8 dynamic")):
        session = ort.InferenceSession(str(exported["out"] / model), providers=["CPUExecutionProvider"])
        meta = session.get_modelmeta().custom_metadata_map
        assert session.get_inputs()[0].name == meta["input_name"] == "images"
        assert session.get_inputs()[0].type == "tensor(uint8)"
        assert session.get_inputs()[0].shape[1:] == [3, 8, 8]
        assert {
            k: meta[k]
            for k in (
                "input_layout",
                "input_dtype",
                "input_range",
                "input_channels",
                "color_mode",
                "resize",
                "normalization",
                "task",
                "output_name",
                "variant",
            )
        } == {
            "input_layout": "NCHW",
            "input_dtype": "uint8",
            "input_range": "[0, 255]",
            "input_channels": "3",
            "color_mode": "RGB",
            "resize": "bilinear",
            "normalization": "in-graph",
            "task": "classification",
            "output_name": "logits",
            "variant": variant,
        }
        assert json.loads(meta["input_size"]) == [8, 8]
        assert json.loads(meta["class_names"]) == ["dark", "light", "mid"]  # image_folder sorts its class folders
        mean, std = json.loads(meta["mean"]), json.loads(meta["std"])
        assert len(mean) == len(std) == 3 and all(0 < m < 1 for m in mean) and all(s > 0 for s in std)
        assert meta["litforge_version"] == __version__
        assert meta["git_commit"] == (origin["commit"] or "unknown")  # the checkpoint's own provenance record
        assert origin["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", meta["git_commit"])
        assert meta["source_checkpoint"] == exported["checkpoint"].name  # the name only, no build-machine path


def test_the_docs_show_the_example_as_it_is():
    page = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- file: examples/classify_onnx\.py -->\n```python\n(.*?)```", page, re.S)
    assert block, "docs/deployment.md lost its examples/classify_onnx.py block"
    assert block.group(1) == EXAMPLE.read_text(encoding="utf-8"), "docs/deployment.md's copy differs from the file"
    code = [line for line in EXAMPLE.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    imports = {m.group(1) for m in re.finditer(r"^(?:import|from) (\w+)", EXAMPLE.read_text(), re.M)}
    assert imports <= {"json", "sys", "numpy", "onnxruntime", "PIL"}, imports
    assert len(code) <= 20
