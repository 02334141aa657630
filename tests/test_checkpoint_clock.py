"""checkpoint_every and time_limit, in-process: parsing, the config rules and the clock decisions (a fake clock)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from litforge.config.check import check_config
from litforge.core.errors import ConfigError
from litforge.runtime.durations import parse_duration, parse_every


def check_value(key: str, value: object) -> None:
    """One of the job's own keys, judged as the config check judges it (litforge.config.settings)."""
    check_config(OmegaConf.create({key: value}))


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30min", 1800),
        ("3h55min", 14100),
        ("90s", 90),
        ("1.5h", 5400),
        ("2d", 172800),
        ("04:00:00", 14400),
        ("1-00:00:30", 86430),
    ],
)
def test_durations_read_as_typed(text, seconds):
    assert parse_duration(text) == seconds


def test_checkpoint_every_takes_steps_or_a_duration_and_refuses_the_rest():
    assert parse_every(500) == ("steps", 500) and parse_every("500") == ("steps", 500)
    assert parse_every("30min") == ("seconds", 1800)
    for bad in (0, -3, "soon", "30 parsecs", True, 1.5):
        with pytest.raises(ConfigError, match=r"checkpoint_every=.* e\.g\. checkpoint_every=500"):
            check_value("checkpoint_every", bad)
    check_value("checkpoint_every", None)


def fake_trainer(step: int = 0) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, strategy=SimpleNamespace(broadcast=lambda v: v, checkpoint_io=None))


def test_checkpoint_every_is_lightnings_unmonitored_model_checkpoint_writing_last_ckpt(tmp_path):
    """checkpoint_every=N is Lightning's ModelCheckpoint(every_n_train_steps=N), a duration its train_time_interval:
    unmonitored (no best-checkpoint ranking, no wait for a validation metric), one file named last, rewritten."""
    from datetime import timedelta

    from pytorch_lightning.callbacks import ModelCheckpoint

    from litforge.callbacks.time_limit import TimeLimit, clock_callbacks
    from litforge.checkpointing.clock import checkpoint_every

    by_steps = checkpoint_every(500, tmp_path)
    assert type(by_steps) is ModelCheckpoint, "Lightning's own class, no subclass"
    assert (by_steps.monitor, by_steps.filename, by_steps.save_top_k) == (None, "last", 1)
    assert "'every_n_train_steps': 500" in by_steps.state_key and "'train_time_interval': None" in by_steps.state_key
    assert by_steps.dirpath == str(tmp_path)
    by_clock = checkpoint_every("30min", tmp_path)
    assert isinstance(by_clock, ModelCheckpoint) and (by_clock.monitor, by_clock.filename) == (None, "last")
    assert f"'train_time_interval': {timedelta(minutes=30)!r}" in by_clock.state_key
    assert "'every_n_train_steps': 0" in by_clock.state_key
    assert clock_callbacks(None, None) == []
    callbacks = clock_callbacks(4, "1h", tmp_path)
    assert [type(cb) for cb in callbacks] == [ModelCheckpoint, TimeLimit]


def test_time_limit_reads_a_duration_slurms_end_time_or_the_earlier_of_both():
    from litforge.callbacks.time_limit import resolve_deadline

    started = lambda: 1000.0  # noqa: E731  (the process start)
    assert resolve_deadline("30min", env={}, started=started) == 2800.0
    assert resolve_deadline("auto", env={}, started=started) is None, "no limit outside SLURM"
    assert resolve_deadline("auto", env={"SLURM_JOB_END_TIME": "5000"}, started=started) == 5000.0
    assert resolve_deadline("2h", env={"SLURM_JOB_END_TIME": "5000"}, started=started) == 5000.0
    assert resolve_deadline("30min", env={"SLURM_JOB_END_TIME": "5000"}, started=started) == 2800.0
    assert resolve_deadline(None, env={"SLURM_JOB_END_TIME": "5000"}, started=started) is None, "null switches it off"
    with pytest.raises(ConfigError, match=r"time_limit='soon' .* time_limit=3h55min"):
        resolve_deadline("soon", env={})
    with pytest.raises(ConfigError, match=r"^time_limit=.*e\.g\. time_limit=3h55min"):
        check_value("time_limit", "3h55")


def test_time_limit_saves_and_stops_once_the_measured_margin_no_longer_fits(monkeypatch, tmp_path):
    from litforge.callbacks import time_limit
    from litforge.callbacks.time_limit import TimeLimit
    from litforge.core.errors import TrainingStopped

    saved: list[int] = []
    monkeypatch.setattr(
        time_limit, "save_latest", lambda trainer: (saved.append(trainer.global_step), ("last.ckpt", 0.5))[1]
    )
    now = [0.0]
    limit = TimeLimit(deadline=100.0, clock=lambda: now[0])  # margin = 30 s + 2 x slowest step (+ val, save)
    trainer = fake_trainer()
    trainer.current_epoch, trainer.default_root_dir, trainer.checkpoint_callback = 0, str(tmp_path), None
    for step, (start, end) in enumerate(((0, 2), (60, 62)), start=1):  # 98 s and 38 s left, margin 34 s: go on
        trainer.global_step = step
        now[0] = start
        limit.on_train_batch_start(trainer, None, None, 0)
        now[0] = end
        limit.on_train_batch_end(trainer, None, None, None, 0)
    assert saved == []
    trainer.global_step = 3
    now[0] = 64
    limit.on_train_batch_start(trainer, None, None, 0)
    now[0] = 70  # a 6 s step: margin 42 s > 30 s left
    with pytest.raises(TrainingStopped, match=rf"time_limit: stopped at step 3 .* resume={tmp_path}") as stopped:
        limit.on_train_batch_end(trainer, None, None, None, 0)
    assert stopped.value.exit_code == 75 and saved == [3]


def test_checkpoint_async_wraps_the_atomic_plugin_writes_a_point_in_time_copy_and_refuses_sharded(tmp_path):
    import torch
    from pytorch_lightning.plugins.io import AsyncCheckpointIO
    from pytorch_lightning.strategies import ModelParallelStrategy

    from litforge.checkpointing.io import AtomicCheckpointIO, with_async_saves

    plugins = with_async_saves([AtomicCheckpointIO()], "auto")
    assert len(plugins) == 1 and isinstance(plugins[0], AsyncCheckpointIO)
    assert isinstance(plugins[0].checkpoint_io, AtomicCheckpointIO), "still atomic"
    assert isinstance(with_async_saves(None, "ddp")[0].checkpoint_io, AtomicCheckpointIO)

    weights = torch.zeros(1000)
    plugins[0].save_checkpoint({"w": weights}, tmp_path / "last.ckpt")
    weights += 1  # training goes on while the write runs: the file holds the step it was saved at
    plugins[0].teardown()  # what the trainer does when fit ends
    assert torch.equal(torch.load(tmp_path / "last.ckpt", weights_only=True)["w"], torch.zeros(1000))
    assert not list(tmp_path.glob(".*.partial"))

    for sharded in ("fsdp", ModelParallelStrategy()):
        with pytest.raises(ConfigError, match=r"^checkpoint_async=true .* sharded .* drop checkpoint_async"):
            with_async_saves([AtomicCheckpointIO()], sharded)


def test_checkpoint_every_writes_last_ckpt_mid_epoch_through_its_own_lightning_model_checkpoint(
    compose_cfg, monkeypatch
):
    """checkpoint_every=3 on 5-batch epochs: last.ckpt at step 3 from the clock's ModelCheckpoint, then at the epoch
    end (step 5) beside the best file; the file's saved state of the clock callback names last.ckpt."""
    from pathlib import Path

    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint

    import litforge.jobs.train as train_job

    saved: list[tuple[int, str]] = []
    real_save = torch.save
    monkeypatch.setattr(
        torch,
        "save",
        lambda obj, f, *a, **k: (
            (
                saved.append((obj["global_step"], Path(getattr(f, "name", str(f))).name))
                if isinstance(obj, dict) and "global_step" in obj
                else None
            )
            or real_save(obj, f, *a, **k)
        ),
    )
    cfg = compose_cfg(
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=5",
        "trainer.limit_val_batches=1",
        "test_after_training=false",
        "print_config=false",
        "callbacks.progress_bar=null",
        "checkpoint_every=3",
    )
    train_job.train(cfg)
    assert [step for step, _ in saved] == [3, 5, 5], saved  # clock save; the best file and last.ckpt at the end
    assert saved[0][1] == ".last.ckpt.partial", "written through the atomic plugin under last.ckpt's name"
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    states = torch.load(last, weights_only=False)["callbacks"]
    (clock_state,) = (
        v for k, v in states.items() if k.startswith(ModelCheckpoint.__name__) and "'every_n_train_steps': 3" in k
    )
    assert Path(clock_state["best_model_path"]) == last


def test_time_limit_keeps_its_margin_for_the_slowest_save_the_atomic_plugin_measured(tmp_path):
    """With litforge's ModelCheckpoint gone, the save time comes from the checkpoint plugin every save goes through."""
    import torch

    from litforge.callbacks.time_limit import TimeLimit
    from litforge.checkpointing.io import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    assert io.last_save_seconds == 0.0
    io.save_checkpoint({"state_dict": {"w": torch.zeros(1000)}}, tmp_path / "last.ckpt")
    assert io.last_save_seconds > 0.0
    limit, trainer = TimeLimit(deadline=1e12), fake_trainer()
    trainer.strategy.checkpoint_io = io
    io.last_save_seconds = 7.0
    limit.note_save_time(trainer)
    io.last_save_seconds = 2.0
    limit.note_save_time(trainer)
    assert limit.slowest_save == 7.0 and limit.margin(None) == limit.floor_s + 2 * 7.0
