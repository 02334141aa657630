"""The notebooks run top to bottom on the embedded data (so they never rot) and are committed without outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "deployment"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_have_no_outputs(path: Path):
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, (
                f"{path.name} has outputs: clear them before committing (jupyter nbconvert --clear-output --inplace)"
            )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # a kernel that is this interpreter (the one with litforge and its dependencies), declared in a temporary
    # folder rather than installed globally
    kernels = tmp_path / "jupyter" / "kernels" / "litforge-test"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "litforge (tests)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("LITFORGE_NOTEBOOK_LOGS", str(tmp_path / "logs"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel draws inline, as in Jupyter

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, kernel_name="litforge-test", timeout=300, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    plots = [
        o
        for c in notebook.cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
    ]
    if path.stem == "quickstart":
        assert len(plots) == 2, "the predictions and the learning curves were drawn"
