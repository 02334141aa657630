"""`tune=lr_find|batch_size`: Lightning's finders before the fit (litforge.jobs.tuning), on real digits runs in-process.

What a user relies on: the plot in the run folder and in TensorBoard, the suggestion used (or not) by the optimizer
of the real fit, the rest of the run untouched by the finder, and one-line refusals where a finder cannot work.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

from conftest import CONF
from litforge.config.check import check_config
from litforge.core.errors import ConfigError
from litforge.jobs.checks import check_tuning
from litforge.jobs.tuning import TB_TAG

# one short epoch; the finder's 20 steps are about as many as the run's own
SHORT = [
    "print_config=false",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=1",
    "test_after_training=false",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "scheduler=none",
    "callbacks.tensorboard_extras.model_graph=false",
    "callbacks.tensorboard_extras.test_images=false",
    "callbacks.early_stopping=null",
]
LR_FIND = ["tune=lr_find", "tune.num_training=20"]


def _train(out: Path, *overrides: str) -> Path:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)
    from litforge.jobs.train import train

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={out}", *SHORT, *overrides])
    GlobalHydra.instance().clear()
    train(cfg)
    return out


def _last(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def _optimizer_lr(checkpoint: dict) -> float:
    return checkpoint["optimizer_states"][0]["param_groups"][0]["lr"]


def test_lr_find_plots_to_the_run_folder_and_tensorboard_and_trains_with_the_suggestion(tmp_path, caplog):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    with caplog.at_level(logging.INFO, logger="litforge.jobs.tuning"):
        run = _train(tmp_path / "applied", *LR_FIND)
    record = json.loads((run / "lr_find.json").read_text())
    suggestion = record["suggestion"]
    assert record["applied"] is True and record["lr_before"] == 0.001 and suggestion != 0.001
    assert 1e-6 <= suggestion <= 1.0 and suggestion in record["results"]["lr"]
    assert len(record["results"]["lr"]) == len(record["results"]["loss"]) == record["steps"] > 12
    assert f"lr_find: suggested lr {suggestion:.1e} (applied" in caplog.text

    with Image.open(run / "lr_find.png") as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={IMAGES: 0}).Reload()
    assert TB_TAG in events.Tags()["images"]
    assert events.Images(TB_TAG)[0].encoded_image_string.startswith(b"\x89PNG")

    checkpoint = _last(run)  # the optimizer the real fit built, and what the checkpoint says trained it
    assert _optimizer_lr(checkpoint) == pytest.approx(suggestion)
    assert checkpoint["hyper_parameters"]["optimizer"]["lr"] == pytest.approx(suggestion)
    assert checkpoint["litforge"]["run_config"]["optimizer"]["lr"] == pytest.approx(suggestion)
    logged = yaml.safe_load((run / "tensorboard" / "hparams.yaml").read_text())  # what the loggers recorded
    assert logged["optimizer"]["lr"] == pytest.approx(suggestion)
    assert not list(run.glob("**/.lr_find_*.ckpt"))  # the finder's scratch checkpoint stays out of the run folder


def test_lr_find_without_apply_reports_only_and_leaves_the_run_as_an_untuned_one(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="litforge.jobs.tuning"):
        run = _train(tmp_path / "reported", *LR_FIND, "tune.apply=false")
    untuned = _train(tmp_path / "untuned")
    record = json.loads((run / "lr_find.json").read_text())
    assert record["applied"] is False and record["suggestion"] is not None and record["lr"] == 0.001
    assert "(not applied, tune.apply=false: optimizer.lr stays 1.0e-03)" in caplog.text
    checkpoint, reference = _last(run), _last(untuned)
    assert _optimizer_lr(checkpoint) == 0.001 and checkpoint["hyper_parameters"]["optimizer"]["lr"] == 0.001
    # the finder's 20 steps left nothing behind: same weights (restored), same batches and dropout (re-seeded)
    assert checkpoint["state_dict"].keys() == reference["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.equal(checkpoint["state_dict"][name], value), name
    assert not (untuned / "lr_find.json").exists()


def _build(compose_cfg, *overrides: str):
    from litforge.core.instantiate import instantiate_group
    from litforge.jobs.build import build_task

    cfg = compose_cfg(*overrides)
    datamodule = instantiate_group("data", cfg.data)
    return cfg, build_task(cfg, datamodule.describe()), datamodule


@pytest.mark.parametrize("apply", [True, False])
def test_batch_size_finder_scales_data_batch_size(compose_cfg, tmp_path, apply):
    """On a GPU Lightning doubles the batch until memory runs out. A CPU run is refused (check_tuning), but the
    finder itself runs here on CPU, where nothing runs out: it doubles `max_trials` times, and what this checks is
    that the size reaches the datamodule's loaders (apply) or is put back (no apply)."""
    from litforge.config.settings import Train, job_settings
    from litforge.core.instantiate import instantiate_group
    from litforge.jobs.tuning import tune

    cfg, task, datamodule = _build(
        compose_cfg,
        "tune=batch_size",
        "tune.max_trials=3",
        "tune.steps_per_trial=1",
        f"tune.apply={str(apply).lower()}",
        "trainer.accelerator=cpu",
    )
    settings = job_settings(cfg, Train).tune
    record = tune(settings, task, datamodule, instantiate_group("trainer", cfg.trainer), [], tmp_path)
    found = record["found"]
    assert found == 2 * 2 ** (3 - 1)  # init_val, then doubled on each of the other trials: no out-of-memory on CPU
    assert json.loads((tmp_path / "batch_size.json").read_text()) == record
    expected = found if apply else 64
    assert (
        datamodule.batch_size
        == datamodule.hparams["batch_size"]
        == datamodule.hparams_initial["batch_size"]
        == expected
    )  # the last is what the loggers record
    assert task.run_config["data"]["batch_size"] == expected
    assert datamodule.train_dataloader().batch_size == expected


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["tune=batch_size", "trainer.accelerator=cpu"],
            "tune=batch_size finds the largest batch that fits GPU memory; this run is on CPU",
        ),
        (["tune=lr_find", "strategy=ddp"], "tune=lr_find runs on one device, not with DDPStrategy"),
        (["tune=lr_find", "strategy=fsdp"], "tune=lr_find runs on one device, not with "),
        (["tune=lr_find", "strategy.name=ddp"], "tune=lr_find runs on one device, not with strategy.name=ddp"),
        (["tune=lr_find", "trainer.devices=2"], "tune=lr_find runs on one device, not trainer.devices=2"),
        (["tune=lr_find", "experiment=cartpole_dqn"], "tune=lr_find steps the task's per-batch loss"),
    ],
)
def test_finders_are_refused_in_one_line_where_they_cannot_work(compose_cfg, overrides, says):
    with pytest.raises(ConfigError) as error:
        check_tuning(compose_cfg(*overrides))
    assert says in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["tune=lr_find", "tune.mode=power"], "tune.mode=power is not a mode of tune=lr_find"),
        (["tune=batch_size", "tune.mode=linear"], "tune.mode=linear is not a mode of tune=batch_size"),
        (["tune=lr_find", "tune.min_lr=0.1", "tune.max_lr=0.01"], "tune.min_lr=0.1 is not below tune.max_lr=0.01"),
        (["tune=lr_find", "tune.num_training=5"], "tune.num_training=5"),
        (["tune=lr_find", "tune.apply=maybe"], "tune.apply='maybe'"),
    ],
)
def test_bad_tune_values_are_refused_naming_the_key(compose_cfg, overrides, says):
    with pytest.raises(ConfigError) as error:
        check_config(compose_cfg(*overrides))
    assert says in str(error.value) and "\n" not in str(error.value)


def test_tune_none_is_the_default_and_checks_nothing(compose_cfg):
    cfg = compose_cfg("strategy=ddp", "trainer.devices=2")
    assert cfg.tune.finder == "none"
    check_tuning(cfg)


def test_lr_find_under_fast_dev_run_and_a_resumed_run_skip_the_finder(compose_cfg, tmp_path, caplog):
    from litforge.config.settings import Train, job_settings
    from litforge.core.instantiate import instantiate_group
    from litforge.jobs.tuning import tune, tune_before_fit

    cfg, task, datamodule = _build(compose_cfg, *LR_FIND, "trainer.fast_dev_run=true")
    trainer_kwargs = instantiate_group("trainer", cfg.trainer)
    with caplog.at_level(logging.INFO, logger="litforge"):
        settings = job_settings(cfg, Train).tune
        record = tune(settings, task, datamodule, trainer_kwargs, [], tmp_path / "smoke")
        assert record["skipped"] == "trainer.fast_dev_run" and task.optimizer_cfg["lr"] == 0.001
        assert not (tmp_path / "smoke" / "lr_find.png").exists()
        tune_before_fit(settings, task, datamodule, trainer_kwargs, [], tmp_path / "resumed", resuming=True)
    assert "tune=lr_find: skipped, this run resumes from a checkpoint" in caplog.text
    assert not (tmp_path / "resumed").exists()


def test_the_training_job_refuses_before_building_anything(compose_cfg, tmp_path):
    from litforge.jobs.train import train

    cfg = compose_cfg("tune=batch_size", "trainer.accelerator=cpu", "print_config=false")
    with pytest.raises(ConfigError, match="tune=batch_size finds the largest batch that fits GPU memory"):
        train(cfg)
    assert not (tmp_path / "provenance.json").exists()  # refused before the run folder was written to
