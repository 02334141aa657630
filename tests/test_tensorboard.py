"""What a finished run shows in TensorBoard, asked of a real `tensorboard` server through its HTTP API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import CONF


def _train(tmp_path: Path, name: str, *overrides: str) -> Path:
    """A short real training run (fit + test of the best checkpoint) into tmp_path/logs/<name>, in-process."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)
    from litforge.jobs.train import train

    out = tmp_path / "logs" / name
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={out}",
                "print_config=false",
                "trainer.max_epochs=2",
                "trainer.limit_train_batches=3",
                "trainer.limit_val_batches=2",
                "trainer.limit_test_batches=2",
                "trainer.enable_progress_bar=false",
                "trainer.log_every_n_steps=1",
                *overrides,
            ],
        )
    GlobalHydra.instance().clear()
    train(cfg)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_tensorboard_server_shows_scalars_images_graph_and_comparable_hparams(tmp_path: Path):
    _train(tmp_path, "lr_high", "optimizer.lr=0.01")
    _train(tmp_path, "lr_low", "optimizer.lr=0.001")
    port = _free_port()
    tensorboard = Path(sys.executable).with_name("tensorboard")
    server = subprocess.Popen(
        [
            str(tensorboard),
            "--logdir",
            str(tmp_path / "logs"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
            "--reload_interval=1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        runs = {"lr_high/tensorboard", "lr_low/tensorboard"}
        deadline = time.monotonic() + 60
        while True:
            try:
                scalars = _get(base, "/data/plugin/scalars/tags")
                if runs <= set(scalars) and all("hp/test/acc" in scalars[r] for r in runs):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"tensorboard did not serve the runs in time: {server.poll()}"
            time.sleep(0.5)

        for run in runs:
            assert {
                "train/loss",
                "train/acc",
                "val/loss",
                "val/acc",
                "test/loss",
                "test/acc",
                "lr-AdamW",
                "time/epoch_s",
                "time/train_samples_per_s",
            } <= set(scalars[run]), scalars[run]
        images = _get(base, "/data/plugin/images/tags")
        assert all({"test/confusion_matrix", "test/predictions"} <= set(images[run]) for run in runs), images
        graphs = _get(base, "/data/plugin/graphs/info")
        assert runs <= set(graphs) and all(graphs[r]["run_graph"] for r in runs), graphs

        experiment = _get(base, "/data/plugin/hparams/experiment", {"experimentName": ""})
        hparams = {info["name"] for info in experiment["hparamInfos"]}
        assert {"optimizer/lr", "net/hidden_dims"} <= hparams, hparams  # in-process train(cfg): the task's hparams
        metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
        assert {"hp/val/acc", "hp/test/acc", "hp/test/loss"} <= metrics, metrics

        groups = _get(
            base,
            "/data/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
                "colParams": [{"hparam": "optimizer/lr"}, {"metric": {"tag": "hp/test/acc", "group": ""}}],
                "startIndex": 0,
                "sliceSize": 10,
            },
        )
        lrs = sorted(g["hparams"]["optimizer/lr"] for g in groups["sessionGroups"])
        assert lrs == [0.001, 0.01], "each run is one comparable row of the HParams table"
        for group in groups["sessionGroups"]:
            values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
            assert 0.0 <= values["hp/test/acc"] <= 1.0
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def test_throughput_logs_nothing_for_an_epoch_it_ran_no_batch_of_and_times_from_the_resume():
    """A run resumed from an end-of-epoch checkpoint reaches on_train_epoch_end without on_train_epoch_start: it used
    to log the seconds since perf_counter's origin as `time/epoch_s`."""
    import time

    import torch

    from litforge.callbacks.throughput import Throughput

    logged: dict[str, float] = {}

    class Module:
        def log(self, name: str, value: float, **kwargs: object) -> None:
            logged[name] = value

    class Trainer:
        world_size = 1

    callback, trainer, module = Throughput(), Trainer(), Module()
    started = time.perf_counter()
    callback.on_train_start(trainer, module)
    callback.on_train_epoch_end(trainer, module)
    assert logged == {}
    callback.on_train_batch_end(trainer, module, None, (torch.zeros(4, 2), torch.zeros(4)), 0)
    callback.on_train_epoch_end(trainer, module)
    assert 0 <= logged["time/epoch_s"] <= time.perf_counter() - started
    assert logged["time/train_samples_per_s"] > 0
