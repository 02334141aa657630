"""logger=mlflow against a real MLflow tracking server: runs, params, metrics, artifacts over its REST API, and
resume=auto continuing the same MLflow run. One test: the server start is the expensive part, so it overlaps the
resumed training run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, single_run

pytestmark = pytest.mark.slow


def _free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999): the server binds it seconds later, and a port from that
    range can meanwhile be handed to another process's outgoing connection (seen in CI: "address already in use")."""
    import random

    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32000")


def _get(base: str, endpoint: str, **query: str) -> dict:
    url = f"{base}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _post(base: str, endpoint: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _wait_until_up(base: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server did not answer within {timeout} s")


def test_mlflow_run_params_metrics_artifacts_over_rest_and_resume_continues_the_run(tmp_path):
    log_dir = tmp_path / "logs"
    common = ["logger=[tensorboard,mlflow]", *TINY, "callbacks.early_stopping=null"]
    first = run_cli("train.py", *common, "trainer.max_epochs=1", log_dir=log_dir, timeout=420)
    assert first.returncode == 0, first.output[-3000:]
    run_dir = single_run(log_dir)
    (run_dir / "metrics.json").unlink()  # as if pre-empted after its first epoch: resume=auto picks it up

    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{log_dir / 'mlflow.db'}",
            "--default-artifact-root",
            (log_dir / "mlartifacts").as_uri(),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        second = run_cli("train.py", *common, "resume=auto", "trainer.max_epochs=2", log_dir=log_dir, timeout=420)
        assert second.returncode == 0, second.output[-3000:]
        base = f"http://127.0.0.1:{port}"
        _wait_until_up(base, server)

        experiment = _get(base, "experiments/get-by-name", experiment_name="train")["experiment"]
        runs = _post(base, "runs/search", {"experiment_ids": [experiment["experiment_id"]]}).get("runs", [])
        assert len(runs) == 1, "resume=auto started a second MLflow run instead of continuing the first"
        run = runs[0]
        run_id = run["info"]["run_id"]
        assert run["info"]["status"] == "FINISHED" and run["info"]["run_name"] == run_dir.name
        ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        assert ckpt["litforge_provenance"]["tracker_runs"] == {"mlflow": run_id}

        params = {p["key"]: p["value"] for p in run["data"]["params"]}  # the flattened run config
        assert params["data.batch_size"] == "64" and params["model._target_"] == "litforge.models.mlp.MLP"
        assert params["trainer.max_epochs"] == "1" and params["optimizer.lr"] == "0.001"  # first values kept
        metrics = {m["key"] for m in run["data"]["metrics"]}
        assert {"val/acc", "val/loss", "test/acc", "test/loss"} <= metrics, metrics  # TensorBoard's names
        history = _get(base, "metrics/get-history", run_id=run_id, metric_key="val/acc")["metrics"]
        assert len(history) == 2 and history[0]["step"] < history[1]["step"]  # one curve over both attempts
        assert read_metrics(run_dir)["metrics"]["test/acc"] == pytest.approx(
            next(m["value"] for m in run["data"]["metrics"] if m["key"] == "test/acc")
        )

        files = {f["path"] for f in _get(base, "artifacts/list", run_id=run_id).get("files", [])}
        assert {"config.yaml", "provenance.json", "best_checkpoint.txt"} <= files, files
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        provenance = json.loads((run_dir / "provenance.json").read_text())
        assert tags["mlflow.source.git.commit"] == provenance["git"]["commit"]
        assert [p["status"] for p in provenance["previous"]] == ["finished"] and provenance["status"] == "finished"
        assert (run_dir / "tensorboard").is_dir()  # the list combined both loggers
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
