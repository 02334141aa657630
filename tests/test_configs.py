"""Every option of every config group composes, instantiates, and (on the embedded data) trains a batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import CONF, make_image_folder

GROUPS = ["data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer", "strategy",
          "debug", "experiment", "hparams_search"]
# datasets that need files a test cannot download: composed and constructed, but not trained on here
NEEDS_DOWNLOAD = {"mnist", "fashion_mnist", "cifar10"}
# options that start several processes or need hardware: composed and built, trained in their own tests
NOT_IN_PROCESS = {("strategy", name) for name in ("ddp", "ddp_spawn", "fsdp", "tp", "fsdp_tp", "tpu", "local_sgd")}
NOT_IN_PROCESS |= {("trainer", "gpu")}  # no GPU here; its clear error is tested with the bad inputs


def options() -> list[tuple[str, str]]:
    return [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]


def test_every_group_has_options():
    found = {g for g, _ in options()}
    assert found >= {"data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer",
                     "strategy", "debug", "experiment"}


@pytest.mark.parametrize(("group", "option"), options(), ids=lambda v: str(v))
def test_option_composes_builds_and_trains(group: str, option: str, compose_cfg, tmp_path: Path):
    from hydra.utils import instantiate

    from litforge.builders import build_task, instantiate_named
    from litforge.train import train

    overrides = [f"{group}={option}", "print_config=false"]
    if group == "data" and option == "image_folder" or "image_folder" in option:
        overrides.append(f"data.root={make_image_folder(tmp_path / 'images')}")
    cfg = compose_cfg(*overrides)

    datamodule = instantiate(cfg.data, _convert_="all")
    task = build_task(cfg, datamodule.describe())
    channels, height, width = datamodule.input_shape
    if getattr(datamodule, "kind", "image") == "image":
        logits = task(torch.zeros(2, channels, height, width))
        assert logits.shape == (2, datamodule.num_classes)
    instantiate_named("callbacks", cfg.get("callbacks"))
    instantiate_named("logger", cfg.get("logger"))

    data_name = cfg.data._target_.rsplit(".", 1)[-1].lower()
    if any(name.replace("_", "") in data_name for name in NEEDS_DOWNLOAD) or (group, option) in NOT_IN_PROCESS:
        return
    cfg.trainer.max_epochs = 1
    cfg.trainer.limit_train_batches = 2
    cfg.trainer.limit_val_batches = 1
    cfg.trainer.limit_test_batches = 1
    cfg.trainer.enable_progress_bar = False
    cfg.trainer.overfit_batches = 0.0
    cfg.trainer.profiler = cfg.trainer.profiler if option == "profiler" else None
    result = train(cfg)
    assert "test/loss" in result["metrics"] or "test/acc" in result["metrics"] or cfg.trainer.fast_dev_run
