"""`steps_per_call=N`: N optimizer steps per Lightning training step (the cure for Lightning's per-step cost on tiny
nets, see benchmarks/step_overhead.py). It must train exactly like one step per call, count optimizer steps, and
refuse the settings whose meaning it would change."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from litforge.core.errors import ConfigError, TrainingStopped


def _logged_steps(out: Path, metric: str) -> list[int]:
    """The logger x-axis values of the rows where `metric` was written (CSV logger)."""
    import csv

    rows = list(csv.DictReader(next((out / "csv").rglob("metrics.csv")).open()))
    return [int(r["step"]) for r in rows if r.get(metric)]


def _train(compose_cfg, out: Path, *overrides: str) -> tuple[dict, dict]:
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "trainer.max_epochs=2",
        "test_after_training=false",
        "print_config=false",
        "logger=csv",
        "callbacks.progress_bar=null",
        "callbacks.model_summary=null",
        "callbacks.tensorboard_extras.model_graph=false",
        *overrides,
    )
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    result = train(cfg)
    ckpt = torch.load(result["last_checkpoint"], map_location="cpu", weights_only=True)
    return result, ckpt


@pytest.mark.parametrize(
    "extra",
    [
        [],  # cosine over epochs (default); 21 steps per epoch = 5 full batches of 4 + one of 1
        ["scheduler=onecycle", "trainer.gradient_clip_val=0.05"],  # per-step schedule sized to the run; clipping active
    ],
    ids=["cosine", "onecycle+clip"],
)
def test_steps_per_call_trains_exactly_like_one_step_per_call(compose_cfg, tmp_path: Path, extra: list[str]):
    _, one = _train(compose_cfg, tmp_path / "one", *extra)
    result, four = _train(compose_cfg, tmp_path / "four", "steps_per_call=4", *extra)
    assert four["global_step"] == one["global_step"] == 42  # optimizer steps, not Lightning batches (12)
    assert Path(result["last_checkpoint"]).exists() and "step000042" in str(result["best_checkpoint"])
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(four["state_dict"][key], value, rtol=0, atol=0, msg=key)
    lr_one = one["optimizer_states"][0]["param_groups"][0]["lr"]
    assert four["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(lr_one, rel=1e-6)
    assert one["lr_schedulers"][0]["last_epoch"] == four["lr_schedulers"][0]["last_epoch"]
    # the loggers' x-axis counts optimizer steps too: validation curves of both runs line up
    assert _logged_steps(tmp_path / "four", "val/acc") == _logged_steps(tmp_path / "one", "val/acc") == [20, 41]


def test_steps_per_call_trains_the_language_model_exactly_like_one_step_per_call(compose_cfg, tmp_path: Path):
    """Any task with a per-step loss gets steps_per_call: the GPT on packed text, clipping and a step schedule on."""
    small = [
        "experiment=gpt_char",
        "data.max_chars=6000",
        "data.block_size=16",
        "data.batch_size=8",
        "model.dim=32",
        "model.depth=1",
        "trainer.val_check_interval=null",
        "callbacks.text_samples=null",
        "scheduler=onecycle",
    ]
    _, one = _train(compose_cfg, tmp_path / "one", *small)
    _, three = _train(compose_cfg, tmp_path / "three", *small, "steps_per_call=3")
    assert three["global_step"] == one["global_step"] > 3
    for key, value in one["state_dict"].items():
        torch.testing.assert_close(three["state_dict"][key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("K", [1, 4])
def test_steps_per_call_resumes_like_an_uninterrupted_run(compose_cfg, tmp_path: Path, K: int):
    _, whole = _train(compose_cfg, tmp_path / "whole", f"steps_per_call={K}", "trainer.max_epochs=3")
    # the same schedule (cosine over 3 epochs), stopped by a step budget after epoch 0 (21 steps)
    first, _ = _train(
        compose_cfg, tmp_path / "part", f"steps_per_call={K}", "trainer.max_epochs=3", "trainer.max_steps=21"
    )
    _, resumed = _train(
        compose_cfg,
        tmp_path / "resumed",
        f"steps_per_call={K}",
        "trainer.max_epochs=3",
        f"ckpt_path={first['last_checkpoint']}",
    )
    assert resumed["global_step"] == whole["global_step"] == 63
    for key, value in whole["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][key], value, rtol=0, atol=0, msg=key)


def test_steps_per_call_stops_at_max_steps_inside_a_batch(compose_cfg, tmp_path: Path):
    _, ckpt = _train(compose_cfg, tmp_path, "steps_per_call=8", "trainer.max_steps=11", "scheduler=onecycle")
    assert ckpt["global_step"] == 11  # onecycle sized to 11 steps would raise on a 12th


def test_plateau_scheduler_steps_on_the_monitored_metric(compose_cfg, tmp_path: Path):
    _, ckpt = _train(compose_cfg, tmp_path, "steps_per_call=4", "scheduler=plateau", "trainer.max_epochs=3")
    state = ckpt["lr_schedulers"][0]
    assert state["last_epoch"] == 3 and state["best"] < 1.0  # stepped once per epoch with val/loss


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["steps_per_call=0"], "steps_per_call=0: expected an integer >= 1"),
        (["steps_per_call=2", "strategy=ddp", "trainer.devices=2"], "runs on one device"),
        (["steps_per_call=2", "trainer.accumulate_grad_batches=2"], "accumulate_grad_batches=2 cannot be combined"),
        (["steps_per_call=2", "trainer.precision=16-mixed"], "does not do fp16 loss scaling"),
        (["steps_per_call=2", "callbacks=[default,ema]"], "EMAWeightAveraging averages once per Lightning step"),
        (["steps_per_call=2", "experiment=cartpole_dqn"], "needs a task with a per-step loss"),
    ],
)
def test_settings_steps_per_call_would_change_are_refused(compose_cfg, overrides: list[str], expected: str):
    from litforge.jobs.train import train

    cfg = compose_cfg("print_config=false", *overrides)
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("+", r"\+")):
        train(cfg)


def test_nonfinite_guard_names_the_exact_step_inside_a_batch_of_steps():
    from unittest.mock import MagicMock

    from litforge.callbacks.fault_tolerance import StopOnNonFiniteLoss

    guard = StopOnNonFiniteLoss()
    trainer = MagicMock(global_step=40, current_epoch=1, checkpoint_callback=None)
    guard.on_train_batch_start(trainer, None, None, 3)
    with pytest.raises(TrainingStopped, match="loss became nan at step 42 "):
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor([0.5, 0.4, float("nan"), float("nan")])}, None, 3)


USER_TASK = '''
from litforge.tasks.classification import ClassificationTask


class LoudTask(ClassificationTask):
    """A user's task whose training_step does more than step_loss: a loop must not skip it."""

    def training_step(self, batch, batch_idx):
        print("user training_step ran")
        return super().training_step(batch, batch_idx)
'''


def test_own_training_step_is_named_and_litforges_own_is_not():
    from litforge.core.contracts import own_training_step
    from litforge.tasks.classification import ClassificationTask
    from litforge.tasks.language_model import LanguageModelTask

    namespace: dict = {}
    exec(USER_TASK, namespace)  # noqa: S102 - the user's module, as the CLI test below writes it
    loud = namespace["LoudTask"].__new__(namespace["LoudTask"])
    assert own_training_step(loud) is not None and own_training_step(loud).endswith("LoudTask")
    for cls in (ClassificationTask, LanguageModelTask):
        assert own_training_step(cls.__new__(cls)) is None, cls


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [["steps_per_call=4"]])
def test_steps_per_call_refuses_a_task_that_overrides_training_step_in_one_line(tmp_path, overrides):
    """The user's training_step is not bypassed silently: one `litforge: error:` line naming the class and the fix."""
    import os

    from conftest import run_cli

    (tmp_path / "user_tasks.py").write_text(USER_TASK)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = run_cli(
        "train.py",
        "task._target_=user_tasks.LoudTask",
        "trainer.max_epochs=1",
        *overrides,
        log_dir=tmp_path / "logs",
        env=env,
        fresh_process=True,
    )
    assert result.returncode == 1, result.output[-2000:]
    errors = [line for line in result.output.splitlines() if line.startswith("litforge: error:")]
    assert len(errors) == 1, result.output[-2000:]
    assert "user_tasks.LoudTask overrides training_step" in errors[0] and "step_loss" in errors[0], errors[0]
    assert "Traceback" not in result.output and "user training_step ran" not in result.output


def test_the_pipeline_loop_refuses_a_task_that_overrides_training_step():
    from types import SimpleNamespace

    from litforge.loops.pipeline import PipelineLoop

    namespace: dict = {}
    exec(USER_TASK, namespace)  # noqa: S102
    loud = namespace["LoudTask"].__new__(namespace["LoudTask"])
    with pytest.raises(ConfigError, match=r"strategy=pipeline .*LoudTask overrides training_step: move that code"):
        PipelineLoop.install(SimpleNamespace(task=loud))  # type: ignore[arg-type]


def test_steps_per_call_is_a_strategy_and_leaves_the_task_and_datamodule_as_their_classes_say(compose_cfg):
    """What runs is what the classes say: the N steps are Lightning's strategy extension points (the training step
    and the training loader), not methods assigned onto the user's task and datamodule."""
    from pytorch_lightning.strategies import SingleDeviceStrategy

    from litforge.core.instantiate import instantiate_group
    from litforge.jobs.build import build_task
    from litforge.loops.steps_per_call import EpochSchedulers, GroupedBatches, StepsPerCall, install

    cfg = compose_cfg("print_config=false")
    datamodule = instantiate_group("data", cfg.data)
    task = build_task(cfg, datamodule.describe())
    callbacks: list = []
    strategy = install(4, task, datamodule, {"accelerator": "cpu"}, "auto", callbacks)
    assert isinstance(strategy, StepsPerCall) and isinstance(strategy, SingleDeviceStrategy)
    assert strategy.steps == 4 and strategy.root_device == torch.device("cpu")
    assert [type(cb) for cb in callbacks] == [EpochSchedulers] and task.automatic_optimization is False
    assert "training_step" not in vars(task) and "train_dataloader" not in vars(datamodule)
    assert install(1, task, datamodule, {}, "auto", []) == "auto"  # N=1: Lightning's own strategy
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    assert not isinstance(loader, GroupedBatches)  # the datamodule's loader is its own; the strategy groups it
