"""Per-step work litforge cut from the default run (issue 17 goal 2), each shown to keep what it replaced: the
number of callbacks Lightning calls hooks on, the progress bar's redraws, the batched train/acc updates. The call
budget itself is pinned in tests/test_speed.py."""

from __future__ import annotations

from typing import Any

import torch

from litforge.jobs.build import build_task

SHAPE = {"input_shape": [1, 8, 8], "num_classes": 10, "class_names": [str(i) for i in range(10)]}


def test_train_accuracy_is_batched_and_exact(compose_cfg):
    """train/acc from one update per TRAIN_ACC_BATCHES steps equals the accuracy of every step's predictions."""
    from litforge.tasks import classification

    task = build_task(compose_cfg("model.dropout=0.0"), SHAPE)
    task.eval()
    updates: list[int] = []
    real_update = task.train_acc.update
    task.train_acc.update = lambda preds, target: updates.append(len(target)) or real_update(preds, target)
    g = torch.Generator().manual_seed(0)
    correct = total = 0
    steps = classification.TRAIN_ACC_BATCHES + 5
    for _ in range(steps):
        images, labels = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
        task.step_loss((images, labels))
        with torch.no_grad():
            correct += int((task(images).argmax(1) == labels).sum())
        total += len(labels)
    assert updates == [16 * classification.TRAIN_ACC_BATCHES]  # one update so far, the rest still kept
    task.flush_train_predictions()  # what on_train_epoch_end does before computing train/acc
    assert updates == [16 * classification.TRAIN_ACC_BATCHES, 16 * 5]
    assert abs(task.train_acc.compute().item() - correct / total) < 1e-6


def test_progress_bar_does_its_per_batch_work_only_when_a_redraw_is_due(monkeypatch):
    from pytorch_lightning.callbacks import RichProgressBar as LightningBar

    from litforge.callbacks import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    drawn: list[int] = []
    monkeypatch.setattr(LightningBar, "on_train_batch_end", lambda self, t, m, o, b, i: drawn.append(i))
    monkeypatch.setattr(progress.RichProgressBar, "total_train_batches", property(lambda self: 10))
    bar = progress.RichProgressBar(refresh_rate=4)  # 4 redraws a second: one every 0.25 s
    for i in range(10):
        bar.on_train_batch_end(None, None, None, None, i)
        clock[0] += 0.0625  # exact in binary: no rounding at the 0.25 s marks
    assert drawn == [0, 4, 8, 9]  # every 0.25 s, and the epoch's last batch (the count the epoch ends on)


def test_a_default_run_goes_through_lightnings_own_callback_dispatch_with_one_tensorboard_callback(
    compose_cfg, monkeypatch
):
    """No litforge replacement of Lightning's `_call_callback_hooks`: the saving comes from fewer callbacks (the
    TensorBoard extras are one), and every hook a callback overrides is called as often as Lightning calls it."""
    import pytorch_lightning as pl
    from pytorch_lightning.trainer import call

    import litforge.jobs.train as train_job
    from litforge.callbacks.images import ClassificationImages
    from litforge.callbacks.tensorboard import HParamsSummary, ModelGraph
    from litforge.callbacks.tensorboard_extras import TensorBoardExtras
    from litforge.callbacks.throughput import Throughput

    lightning_dispatch = call._call_callback_hooks
    calls: list[str] = []
    seen: list[Any] = []

    class Counts(pl.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            calls.append("batch_end")

        def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            seen.extend(trainer.callbacks)

    real = train_job.instantiate_named
    monkeypatch.setattr(
        train_job,
        "instantiate_named",
        lambda group, node: real(group, node) + ([Counts()] if group == "callbacks" else []),
    )
    cfg = compose_cfg(
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "test_after_training=false",
        "print_config=false",
    )
    train_job.train(cfg)
    assert calls == ["batch_end"] * 3
    assert call._call_callback_hooks is lightning_dispatch
    assert call._call_callback_hooks.__module__ == "pytorch_lightning.trainer.call"
    assert sum(isinstance(cb, TensorBoardExtras) for cb in seen) == 1
    assert not [cb for cb in seen if isinstance(cb, (Throughput, HParamsSummary, ModelGraph, ClassificationImages))]


def test_background_checkpoint_write_is_ordered_durable_and_waited_for(tmp_path, monkeypatch):
    """durable_in_background: the rename happens after the file's fsync, in the background; the next save, a load
    and teardown wait for it, so a reader never sees the old file, and the partial file never outlives a write."""
    import os

    from litforge.checkpointing import io as checkpoint_io
    from litforge.checkpointing.load import load_checkpoint

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(checkpoint_io.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(checkpoint_io.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b))
    target = tmp_path / "last.ckpt"
    io = checkpoint_io.AtomicCheckpointIO(durable_in_background=True)
    io.save_checkpoint({"state_dict": {}, "step": 1}, target)
    io.save_checkpoint({"state_dict": {}, "step": 2}, target)  # waits for the first write, then starts its own
    assert load_checkpoint(target)["step"] == 2  # waits for the second
    assert events == ["fsync", "replace", "fsync"] * 2  # file fsync, rename, folder fsync; in order, per write
    io.save_checkpoint({"state_dict": {}, "step": 3}, target)
    io.teardown()  # the end of fit/test
    assert torch.load(target, weights_only=True)["step"] == 3 and not (tmp_path / ".last.ckpt.partial").exists()
    monkeypatch.setattr(checkpoint_io.os, "replace", lambda a, b: (_ for _ in ()).throw(OSError("disk full")))
    io.save_checkpoint({"state_dict": {}, "step": 4}, target)
    try:
        io.teardown()
    except OSError as exc:  # a failed background write surfaces on the training thread
        assert "disk full" in str(exc)
    else:
        raise AssertionError("the background write's error was lost")
    assert torch.load(target, weights_only=True)["step"] == 3  # the previous file is whole


def test_steps_per_call_auto_picks_more_steps_for_a_cheaper_step():
    from litforge.loops.steps_per_call import AUTO_CAP, choose_steps_per_call

    overhead = 0.7e-3  # Lightning's per-step cost
    slow, medium, fast = (choose_steps_per_call(step, overhead, 1_000) for step in (50e-3, 2e-3, 0.2e-3))
    assert slow == 1 and medium == 7 and fast == AUTO_CAP  # 0.7 ms <= 5 % of 7 x 2 ms; 70 capped at 64
    assert slow < medium < fast
    assert choose_steps_per_call(0.2e-3, overhead, 21) == 21  # never more than an epoch's batches
    assert choose_steps_per_call(0.2e-3, overhead, float("inf")) == AUTO_CAP  # a streamed epoch: the cap


def test_steps_per_call_auto_trains_with_the_chosen_n(compose_cfg, monkeypatch):
    """auto times steps on a copy (the run's weights and RNG untouched), installs the N it chose, and trains."""
    import litforge.jobs.train as train_job
    from litforge.loops import steps_per_call

    chosen: list[int] = []
    real_choose = steps_per_call.choose_steps_per_call
    monkeypatch.setattr(
        steps_per_call,
        "choose_steps_per_call",  # a 10x cheaper step than measured: a larger N
        lambda step, overhead, batches: chosen.append(real_choose(step / 10, overhead, batches)) or chosen[-1],
    )
    seen: list[int] = []
    real_install = steps_per_call.install

    def install(steps, task, *args):
        seen.append(task)
        return real_install(steps, task, *args)

    monkeypatch.setattr(steps_per_call, "install", install)
    cfg = compose_cfg(
        "steps_per_call=auto",
        "trainer.max_epochs=1",
        "trainer.limit_val_batches=1",
        "test_after_training=false",
        "print_config=false",
        "callbacks.progress_bar=null",
    )
    result = train_job.train(cfg)
    assert len(chosen) == 1 and 1 <= chosen[0] <= 21
    assert seen[0].trainer.strategy.steps == chosen[0]  # the steps_per_call strategy ran the N auto chose
    assert seen[0].trainer.global_step == 21  # every batch trained once, whatever N is
    assert "val/acc" in result["metrics"]


def test_digits_read_without_scikit_learn_equal_load_digits(monkeypatch):
    """The digits come from scikit-learn's own CSV file without importing scikit-learn (a start-up cost), and are
    exactly what `sklearn.datasets.load_digits` returns."""
    import numpy as np
    import sklearn.datasets

    from litforge.data.digits import digits_arrays

    reference = sklearn.datasets.load_digits()
    monkeypatch.setattr(sklearn.datasets, "load_digits", lambda: (_ for _ in ()).throw(AssertionError("imported")))
    pixels, labels = digits_arrays()  # the fallback (importing scikit-learn) is not taken
    assert np.array_equal(pixels, reference.data) and np.array_equal(labels, reference.target)


def _fit_counting_saves(compose_cfg, monkeypatch, *overrides: str) -> tuple[Any, list[int]]:
    """An in-process default run of tiny epochs; the global step of every checkpoint serialised."""
    import litforge.jobs.train as train_job

    saved: list[int] = []
    real_save = torch.save
    monkeypatch.setattr(
        torch,
        "save",
        lambda obj, f, *a, **k: (
            (saved.append(obj["global_step"]) if isinstance(obj, dict) and "global_step" in obj else None)
            or real_save(obj, f, *a, **k)
        ),
    )
    cfg = compose_cfg(
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=2",
        "test_after_training=false",
        "print_config=false",
        "callbacks.progress_bar=null",
        *overrides,
    )
    train_job.train(cfg)
    return cfg, saved


def test_best_and_last_are_two_lightning_model_checkpoints_and_last_follows_the_latest_step(compose_cfg, monkeypatch):
    """lr=1e-12 (the predictions never change): the first epoch is the best and no later one beats it. The monitored
    ModelCheckpoint keeps that file; the unmonitored one rewrites last.ckpt at every epoch end, so resume=auto and
    metrics.json's last_checkpoint get the latest step, not the best one (Lightning's save_last would stay there)."""
    import json
    from pathlib import Path

    from pytorch_lightning.callbacks import ModelCheckpoint

    cfg, saved = _fit_counting_saves(
        compose_cfg, monkeypatch, "trainer.max_epochs=3", "optimizer.lr=1e-12", "scheduler=none"
    )
    folder = Path(cfg.paths.output_dir) / "checkpoints"
    best, last = folder / "epoch000-step000004.ckpt", folder / "last.ckpt"
    assert saved == [4, 4, 8, 12], "epoch 0: the best file and last.ckpt; epochs 1, 2: last.ckpt alone"
    assert sorted(p.name for p in folder.glob("*.ckpt")) == [best.name, last.name]
    assert torch.load(best, weights_only=False)["global_step"] == 4
    record = torch.load(last, weights_only=False)
    assert record["global_step"] == 12
    states = {k: v for k, v in record["callbacks"].items() if k.startswith(ModelCheckpoint.__name__)}
    assert sorted(Path(v["best_model_path"]).name for v in states.values()) == [best.name, last.name]
    metrics = json.loads((Path(cfg.paths.output_dir) / "metrics.json").read_text())
    assert Path(metrics["best_checkpoint"]) == best and Path(metrics["last_checkpoint"]) == last
