"""Elastic restarts: `torchrun --max-restarts=1 ... train.py resume=auto`, one rank killed, ends like an uninterrupted
run.

torchrun restarts the whole worker group when a rank dies; `resume=auto` on every rank continues from the newest
checkpoint (`checkpoint_every`). The reference is one process on the same global batch (2 x 16 = 32), which DDP
matches to float rounding (tests/test_strategies.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY, read_metrics, run_cli, run_dirs

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

COMMON = [
    *TINY,
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=6",
    "callbacks.early_stopping=null",
    "model.dropout=0.0",
    "checkpoint_every=4",
]  # last.ckpt at steps 4, 6, 8, 12, ...; rank 1 dies at step 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _finished_run(log_dir) -> "os.PathLike":
    finished = [run for run in run_dirs(log_dir) if (run / "metrics.json").exists()]
    assert len(finished) == 1, f"expected one finished run folder, found {run_dirs(log_dir)}"
    return finished[0]


def test_torchrun_restarts_the_group_after_a_rank_dies_and_resume_auto_ends_like_an_uninterrupted_run(tmp_path):
    single = run_cli("train.py", *COMMON, "data.batch_size=32", log_dir=tmp_path / "one")
    assert single.returncode == 0, single.output[-3000:]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--max-restarts=1",
        f"--master-port={_free_port()}",
        str(ROOT / "train.py"),
        f"paths.log_dir={tmp_path / 'elastic'}",
        "resume=auto",
        "strategy=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "data.batch_size=16",
        *COMMON,
        "+callbacks.fault._target_=faults.SignalAt",
        "+callbacks.fault.step=10",
        "+callbacks.fault.signal=SIGKILL",
        "+callbacks.fault.rank=1",
        "+callbacks.fault.attempt=0",
    ]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "FAULT SIGKILL rank 1" in output, "rank 1 was not killed: nothing was tested"
    assert "resuming" in output and "from last.ckpt" in output, "the restarted group did not resume"
    run = _finished_run(tmp_path / "elastic")
    got = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    expected = torch.load(_finished_run(tmp_path / "one") / "checkpoints" / "last.ckpt", weights_only=True)
    assert (got["epoch"], got["global_step"]) == (expected["epoch"], expected["global_step"])
    assert got["global_step"] == 18
    for key, tensor in expected["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][key], tensor, atol=2e-5, rtol=1e-4, msg=key)
    for name in ("val/acc", "test/acc"):
        assert read_metrics(run)["metrics"][name] == pytest.approx(
            read_metrics(_finished_run(tmp_path / "one"))["metrics"][name], abs=1e-6
        ), name
