"""Start-up stays cheap: `--help` and config printing never import torch or Lightning (see benchmarks/startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

HEAVY = (
    "torch",
    "pytorch_lightning",
    "lightning_fabric",
    "torchvision",
    "torchmetrics",
    "sklearn",
    "matplotlib",
    "tensorboard",
)

# run the real entry point in a fresh interpreter, then report which heavy packages it imported
PROBE = """
import runpy, sys
sys.argv = ["train.py", *{args!r}]
try:
    runpy.run_path("train.py", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print("IMPORTED", sorted(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize(("args", "hash_seed"), [(("--help",), 1), (("--cfg", "job"), 2)], ids=["help", "cfg-job"])
def test_help_and_config_do_not_import_torch(args: tuple[str, ...], hash_seed: int):
    """Real: a fresh interpreter (nothing imported beforehand), each with its own hash seed."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args), heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout, proc.stdout[-2000:]
    if args == ("--help",):
        assert "model:" in proc.stdout or "model" in proc.stdout  # the help really listed the config groups
