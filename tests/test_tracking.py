"""logger=mlflow against a real MLflow tracking server: runs, params, metrics, artifacts over its REST API, and
resume=auto continuing the same MLflow run.

One `mlflow server` for the module (starting one is the expensive part: 15-25 s on a busy 2-core machine), over the
SQLite database that the first test's offline store writes: that test trains into the default offline store (no
server involved in the writes) and reads it back through the server; the second writes to the server over HTTP
(`tracking_uri=http://...`, as docs/tracking.md shows it), artifacts uploaded through it."""

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
from collections.abc import Iterator
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


def _start_server(port: int, store: str, artifacts: list[str]) -> subprocess.Popen:
    """`mlflow server` on 127.0.0.1:<port> over the SQLite database `store`, in its own session (stopped with
    :func:`_stop_server`). `python -m mlflow`: the interpreter's own package, whatever its bin/ holds."""
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    return subprocess.Popen(
        [*command, "--backend-store-uri", f"sqlite:///{store}", *artifacts],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to its session, SIGKILL 5 s later: its workers can outlive a SIGTERM by 30 s and more (the test
    database is thrown away)."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A live `mlflow server` on 127.0.0.1 over `<folder>/mlflow.db` (schema created before any test writes to it),
    serving artifacts from `<folder>/served`: (its URL, the folder)."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start_server(port, str(folder / "mlflow.db"), ["--artifacts-destination", str(folder / "served")])
    try:
        _wait_until_up(base, proc)
        yield base, folder
    finally:
        _stop_server(proc)


def test_mlflow_run_params_metrics_artifacts_over_rest_and_resume_continues_the_run(server):
    """Real: two CLI runs (the second a resume=auto) writing to the default offline store (SQLite under
    paths.log_dir, the server's database), read back over HTTP through the live server's REST API."""
    base, log_dir = server
    common = ["logger=[tensorboard,mlflow]", *TINY, "callbacks.early_stopping=null"]
    first = run_cli("train.py", *common, "trainer.max_epochs=1", log_dir=log_dir, timeout=420)
    assert first.returncode == 0, first.output[-3000:]
    run_dir = single_run(log_dir)
    (run_dir / "metrics.json").unlink()  # as if pre-empted after its first epoch: resume=auto picks it up

    second = run_cli("train.py", *common, "resume=auto", "trainer.max_epochs=2", log_dir=log_dir, timeout=420)
    assert second.returncode == 0, second.output[-3000:]

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


def test_a_run_logs_to_a_live_mlflow_server_over_http_and_resumes_into_the_same_run(server, tmp_path):
    """Real: the live `mlflow server` on 127.0.0.1 (artifacts served by it: the client uploads them over HTTP to its
    `--artifacts-destination`), written to by two real CLI runs through
    `logger.mlflow.tracking_uri=http://127.0.0.1:<port>`, the second a resume=auto of the first; read back through
    the REST API with plain HTTP: one MLflow run, its params, metrics per step across both attempts, its artifacts
    (listed and downloaded). Nothing is written to the offline store."""
    (base, server_side), log_dir = server, tmp_path / "logs"
    common = [
        "logger=mlflow",
        f"logger.mlflow.tracking_uri={base}",
        "logger.mlflow.experiment_name=over_http",  # the server also holds the offline test's experiment, `train`
        *TINY,
        "callbacks.early_stopping=null",
        "trainer.log_every_n_steps=2",
    ]
    first = run_cli("train.py", *common, "trainer.max_epochs=1", log_dir=log_dir, timeout=420)
    assert first.returncode == 0, first.output[-3000:]
    run_dir = single_run(log_dir)
    (run_dir / "metrics.json").unlink()  # as if pre-empted after its first epoch: resume=auto picks it up
    second = run_cli("train.py", *common, "resume=auto", "trainer.max_epochs=2", log_dir=log_dir, timeout=420)
    assert second.returncode == 0, second.output[-3000:]
    assert not (log_dir / "mlflow.db").exists() and not (log_dir / "mlartifacts").exists(), "wrote offline"

    experiment = _get(base, "experiments/get-by-name", experiment_name="over_http")["experiment"]
    runs = _post(base, "runs/search", {"experiment_ids": [experiment["experiment_id"]]}).get("runs", [])
    assert len(runs) == 1, "resume=auto started a second MLflow run instead of continuing the first"
    run = runs[0]
    run_id = run["info"]["run_id"]
    assert run["info"]["status"] == "FINISHED" and run["info"]["run_name"] == run_dir.name
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["litforge_provenance"]["tracker_runs"] == {"mlflow": run_id}

    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["data.batch_size"] == "64" and params["trainer.max_epochs"] == "1"  # the first attempt's
    assert params["logger.mlflow.tracking_uri"] == base
    # per step: 4 training batches per epoch, train/loss every 2nd step; val/loss once per epoch; both attempts
    train_loss = _get(base, "metrics/get-history", run_id=run_id, metric_key="train/loss")["metrics"]
    assert sorted(m["step"] for m in train_loss) == [1, 3, 5, 7], train_loss
    val_loss = _get(base, "metrics/get-history", run_id=run_id, metric_key="val/loss")["metrics"]
    assert sorted(m["step"] for m in val_loss) == [3, 7], val_loss
    test_acc = next(m["value"] for m in run["data"]["metrics"] if m["key"] == "test/acc")
    assert read_metrics(run_dir)["metrics"]["test/acc"] == pytest.approx(test_acc)

    files = {f["path"] for f in _get(base, "artifacts/list", run_id=run_id).get("files", [])}
    assert {"config.yaml", "provenance.json", "best_checkpoint.txt"} <= files, files
    url = f"{base}/get-artifact?{urllib.parse.urlencode({'path': 'config.yaml', 'run_uuid': run_id})}"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.read().decode() == (run_dir / ".hydra" / "config.yaml").read_text()
    uploaded = {p.name for p in (server_side / "served").rglob("*") if p.is_file()}
    assert {"config.yaml", "provenance.json"} <= uploaded, "the artifacts did not travel to the server"
