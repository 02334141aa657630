"""Per-step cost and the one-switch speed options (compile, channels_last, data.on_device, EMA).

The step cost is pinned by counting Python function calls per training step (`sys.setprofile`): unlike wall time it
does not move with machine load, so a regression (an extra `self.log` per step, a callback doing work every batch)
fails here on any machine. benchmarks/step_overhead.py prints the same count next to the timings.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from budgets import (  # the pinned figures, in one place (docs/performance.md states them; tests/test_docs.py checks)
    CALLS_PER_EPOCH_BOUNDARY_BUDGET,
    CALLS_PER_STEP_BUDGET,
    STEPS_PER_CALL_BUDGET,
    USUAL_DEFAULTS,
)


class CountCalls(Callback):
    """Counts Python calls from batch `start` to batch `start + steps` of epoch 1 (inside an epoch: no validation)."""

    def __init__(self, start: int = 5, steps: int = 10) -> None:
        self.start, self.steps = start, steps
        self.calls = 0
        self.per_step: float | None = None

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch != 1:
            return
        if batch_idx == self.start:
            self.first_step = trainer.global_step
            sys.setprofile(self._profile)
        elif batch_idx == self.start + self.steps:
            sys.setprofile(None)
            # per optimizer step: with steps_per_call=N one Lightning step runs N of them
            self.per_step = self.calls / (trainer.global_step - self.first_step)


def test_default_run_python_calls_per_step_within_budget(compose_cfg, monkeypatch):
    import litforge.jobs.train as train_job

    counter = CountCalls()
    real = train_job.instantiate_named
    monkeypatch.setattr(
        train_job,
        "instantiate_named",
        lambda group, node: real(group, node) + ([counter] if group == "callbacks" else []),
    )
    cfg = compose_cfg("trainer.max_epochs=2", "test_after_training=false", "print_config=false")
    train_job.train(cfg)  # the default run: logger, Rich progress bar, checkpointing, early stopping, LR monitor
    assert counter.per_step is not None, "the counting window was never reached"
    assert counter.per_step < CALLS_PER_STEP_BUDGET < USUAL_DEFAULTS, f"{counter.per_step:.0f} Python calls per step"


class CountEpochBoundary(Callback):
    """Counts Python calls from the end of epoch 1's last training batch to the start of epoch 2's first one."""

    def __init__(self) -> None:
        self.calls = 0
        self.total: int | None = None

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == 1 and batch_idx + 1 == trainer.num_training_batches:
            sys.setprofile(self._profile)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == 2 and batch_idx == 0:
            sys.setprofile(None)
            self.total = self.calls
            self.best_then = Path(trainer.checkpoint_callback.best_model_path).name


def test_default_run_python_calls_per_epoch_boundary_within_budget(compose_cfg, monkeypatch):
    import litforge.jobs.train as train_job

    counter = CountEpochBoundary()
    real = train_job.instantiate_named
    monkeypatch.setattr(
        train_job,
        "instantiate_named",
        lambda group, node: real(group, node) + ([counter] if group == "callbacks" else []),
    )
    cfg = compose_cfg("trainer.max_epochs=3", "test_after_training=false", "print_config=false")
    train_job.train(cfg)
    assert counter.total is not None, "the counting window was never reached"
    assert counter.best_then.startswith("epoch001-"), "epoch 1 improved: a best file and last.ckpt were due together"
    assert counter.total < CALLS_PER_EPOCH_BOUNDARY_BUDGET, f"{counter.total} Python calls at the epoch boundary"


def test_steps_per_call_cuts_python_calls_per_optimizer_step(compose_cfg, monkeypatch):
    import litforge.jobs.train as train_job

    counter = CountCalls(start=0, steps=2)  # 2 Lightning steps of epoch 1 = 16 optimizer steps (21 per epoch)
    real = train_job.instantiate_named
    monkeypatch.setattr(
        train_job,
        "instantiate_named",
        lambda group, node: real(group, node) + ([counter] if group == "callbacks" else []),
    )
    cfg = compose_cfg("trainer.max_epochs=2", "test_after_training=false", "print_config=false", "steps_per_call=8")
    train_job.train(cfg)
    assert counter.per_step is not None, "the counting window was never reached"
    assert counter.per_step < STEPS_PER_CALL_BUDGET, f"{counter.per_step:.0f} Python calls per optimizer step"


def test_train_loss_is_logged_on_logging_steps_and_train_acc_per_epoch(compose_cfg, tmp_path: Path):
    """The cheaper logging writes the same metric names, at Lightning's log_every_n_steps cadence."""
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=5",
        "logger=csv",
        "print_config=false",
        "callbacks.progress_bar=null",
    )
    result = train(cfg)
    rows = (tmp_path / "csv").rglob("metrics.csv")
    text = next(rows).read_text().splitlines()
    header = text[0].split(",")
    steps_with_loss = [
        int(r.split(",")[header.index("step")]) for r in text[1:] if r.split(",")[header.index("train/loss")]
    ]
    assert steps_with_loss and all((s + 1) % 5 == 0 for s in steps_with_loss), steps_with_loss
    assert len(steps_with_loss) == 2 * 21 // 5  # 21 steps per epoch on digits: every 5th step of 42
    epochs_with_acc = [r for r in text[1:] if r.split(",")[header.index("train/acc")]]
    assert len(epochs_with_acc) == 2
    assert {"train/loss", "train/acc", "val/acc", "test/acc"} <= set(result["metrics"])


def test_compile_checkpoints_load_without_orig_mod_prefix(compose_cfg, monkeypatch):
    """compile=true compiles the net in place: the checkpoint loads into an uncompiled task (eval/predict path)."""
    from litforge.checkpointing.load import load_checkpoint
    from litforge.jobs.train import train
    from litforge.tasks.restore import restore_task

    # the eager backend traces the net like inductor does but skips code generation (minutes on 2 busy cores);
    # the names in the state dict do not depend on the backend
    cfg = compose_cfg(
        "compile={backend:eager}",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "print_config=false",
        "callbacks.progress_bar=null",
    )
    compiled: list[dict[str, Any]] = []
    real_compile = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compiled.append(kw) or real_compile(self, **kw))
    result = train(cfg)
    assert compiled == [{"backend": "eager"}]
    last = str(Path(result["best_checkpoint"]).parent / "last.ckpt")
    checkpoint = load_checkpoint(last)
    assert checkpoint["state_dict"] and not any("_orig_mod" in k for k in checkpoint["state_dict"])
    task = restore_task(checkpoint, last)
    assert torch.equal(task.state_dict()["net.net.1.weight"], checkpoint["state_dict"]["net.net.1.weight"])


def test_compile_compiles_the_net_in_place():
    from litforge.models.mlp import MLP
    from litforge.models.speed import apply_speed_options

    task = torch.nn.Module()
    task.net = MLP(1, (8, 8), 10)
    names = list(task.state_dict())
    apply_speed_options(task.net, compile={"backend": "eager"})
    assert task.net._compiled_call_impl is not None  # nn.Module.compile's in-place compiled forward
    assert list(task.state_dict()) == names
    assert task.net(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_channels_last_converts_weights_and_inputs():
    from litforge.models.cnn import CNN
    from litforge.models.speed import apply_speed_options

    task = torch.nn.Module()
    task.net = CNN(3, (8, 8), 10)
    seen: list[bool] = []
    task.net.features[0].register_forward_pre_hook(
        lambda m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    reference = {k: v.clone() for k, v in task.state_dict().items()}
    apply_speed_options(task.net, channels_last=True)
    conv = task.net.features[0][0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(reference[k], v) for k, v in task.state_dict().items())  # same values, other layout
    task.net(torch.randn(2, 3, 8, 8))
    assert seen == [True]


def test_on_device_is_a_no_op_on_cpu_and_trains(compose_cfg):
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "data.on_device=true",
        "trainer=cpu",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "print_config=false",
        "callbacks.progress_bar=null",
    )
    assert "test/acc" in train(cfg)["metrics"]


def test_on_device_moves_splits_to_the_trainer_device(monkeypatch):
    """The CUDA path, exercised with a stand-in device: the split tensors move once and the loader indexes there."""
    from types import SimpleNamespace

    from litforge.data.digits import DigitsDataModule

    dm = DigitsDataModule(on_device=True)
    dm.setup()
    moved: list[str] = []
    real_to = torch.Tensor.to

    def fake_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args and isinstance(args[0], torch.device) and args[0].type == "meta":
            moved.append(str(args[0]))
            return real_to(self, "cpu")  # stays usable: we only check the move is asked for, once per split
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    dm.trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("meta")), global_rank=0, world_size=1
    )
    dm.split_tensors("train")
    assert moved == ["meta", "meta"]  # images and labels


def test_ema_callback_saves_averaged_weights(compose_cfg):
    from litforge.checkpointing.load import load_checkpoint
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "callbacks=[default,ema]",
        "callbacks.ema.decay=0.5",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=4",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "print_config=false",
        "callbacks.progress_bar=null",
    )
    result = train(cfg)
    checkpoint = load_checkpoint(result["best_checkpoint"])
    averaged, current = checkpoint["state_dict"], checkpoint["current_model_state"]
    name = "net.net.1.weight"
    assert not torch.equal(averaged[name], current[name])  # the checkpoint's weights are the EMA, not the raw ones
    assert "averaging_state" in checkpoint


@pytest.mark.parametrize("compile_value", [False, {"backend": "eager"}])
def test_net_options_need_a_net(compile_value):
    from litforge.core.errors import ConfigError
    from litforge.parallel.net_options import NetOptions, prepare_net

    if compile_value:
        with pytest.raises(ConfigError, match="compile act on the task's `net`, and Mine has none: set compile=false"):
            prepare_net(None, NetOptions(compile=compile_value), "Mine")
    else:
        prepare_net(None, NetOptions(), "Mine")  # nothing configured: nothing to do, no error


class TaskWithoutNetOptions(pl.LightningModule):
    """A user's own LightningModule that keeps a net but takes no net options (not a LitforgeTask)."""

    data_kind = ("image",)

    def __init__(self, **configs: object) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 2)


def test_net_options_for_a_task_that_takes_none_are_refused_in_one_line(compose_cfg):
    from litforge.config.settings import Train, job_settings
    from litforge.core.errors import ConfigError
    from litforge.jobs.train import build_training_task

    cfg = compose_cfg("task._target_=test_speed.TaskWithoutNetOptions", "compile=true", "channels_last=true")
    shape = {"input_shape": [1, 8, 8], "num_classes": 10}
    with pytest.raises(ConfigError, match=r"^compile, channels_last: applied by the task's configure_model, and "):
        build_training_task(cfg, shape, job_settings(cfg, Train))
    plain = compose_cfg("task._target_=test_speed.TaskWithoutNetOptions")  # nothing asked: it trains as it is
    assert isinstance(build_training_task(plain, shape, job_settings(plain, Train)), TaskWithoutNetOptions)


def test_the_task_prepares_its_net_once_in_lightnings_configure_model(monkeypatch):
    """The net options the training job sets are applied by the task's own `configure_model`, once, although
    Lightning calls the hook at fit, validate and test."""
    from litforge.models.mlp import MLP
    from litforge.parallel import net_options
    from litforge.tasks.classification import ClassificationTask

    net, optimizer = {"_target_": "litforge.models.mlp.MLP"}, {"_target_": "torch.optim.SGD", "lr": 0.1}
    task = ClassificationTask(net=net, optimizer=optimizer, input_shape=[1, 4, 4], num_classes=3)
    assert isinstance(task.net, MLP)
    prepared: list[object] = []
    monkeypatch.setattr(net_options, "apply_speed_options", lambda net, **kw: prepared.append((net, kw)))
    task.net_options = net_options.NetOptions(compile={"backend": "eager"})
    task.configure_model()
    task.configure_model()
    assert prepared == [(task.net, {"compile": {"backend": "eager"}, "channels_last": False})]


# ---- host syncs -----------------------------------------------------------------------------------
# Calls that make the CPU wait for a GPU when the tensor lives there. Counted on CPU by patching them
# (Tensor.item/tolist/__float__/__bool__/cpu/numpy); two kinds of call never wait and are not counted: the
# optimizers' step counters (torch/optim keeps them on the host) and 0-d float64 CPU tensors, which is how
# litforge logs values it already read to the host (litforge.runtime.host_reads.host_scalar).
SYNC_METHODS = ("item", "tolist", "__float__", "__bool__", "__int__", "cpu", "numpy")


class CountSyncs(Callback):
    """Counts the calls above between the starts of training batches `start` and `stop` of the first epoch (steady
    state: no validation, no epoch end inside the window)."""

    def __init__(self, start: int = 1, stop: int = 20) -> None:
        self.start, self.stop = start, stop
        self.counting = False
        self.calls: list[str] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx in (self.start, self.stop):
            self.counting = batch_idx == self.start


def _patch_sync_methods(monkeypatch, counter: CountSyncs) -> None:
    import traceback

    def wrap(name: str, real: Any) -> Any:
        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if counter.counting and not (
                self.device.type == "cpu" and self.dtype == torch.float64 and self.numel() == 1
            ):
                caller = traceback.extract_stack(limit=3)[0]
                if f"torch{__import__('os').sep}optim" not in caller.filename:
                    counter.calls.append(f"{name} from {Path(caller.filename).name}:{caller.lineno}")
            return real(self, *args, **kwargs)

        return counted

    for name in SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))


def test_default_run_makes_at_most_one_host_sync_per_logging_interval(compose_cfg, monkeypatch):
    """The default run (Rich progress bar, NaN guard, logger, checkpointing) reads the device once per
    `trainer.log_every_n_steps` steps in steady state. It made ~2.8 reads per step before (issue 17): the NaN guard
    read every loss, Lightning read the logged device tensors for the loggers and the progress bar; a guard set
    back to `check_every_n_steps=1`, or `train/loss` logged as a device tensor, fails here."""
    import litforge.jobs.train as train_job

    counter = CountSyncs()
    real = train_job.instantiate_named
    monkeypatch.setattr(
        train_job,
        "instantiate_named",
        lambda group, node: real(group, node) + ([counter] if group == "callbacks" else []),
    )
    _patch_sync_methods(monkeypatch, counter)
    cfg = compose_cfg(
        "trainer.max_epochs=1",
        "trainer.log_every_n_steps=5",
        "trainer.limit_val_batches=1",
        "test_after_training=false",
        "print_config=false",
    )
    train_job.train(cfg)
    steps = counter.stop - counter.start  # 19 steps: logging steps every 5 of them
    assert len(counter.calls) <= -(-steps // 5), counter.calls
    assert counter.calls, "the logging steps read the loss once each: the count must see them"


def test_gpt_forward_and_image_normalisation_never_read_the_device(monkeypatch):
    """The packed-document mask has no data-dependent branch (it asked `.any()` of every batch), unpacked rows take
    the causal kernel without looking at the data, and the normalisation statistics are built once, not per batch."""
    from litforge.data.base import ImageDataModule
    from litforge.models.gpt import GPT

    counter = CountSyncs()
    counter.counting = True
    _patch_sync_methods(monkeypatch, counter)
    net = GPT(vocab_size=11, block_size=8, dim=16, depth=1, heads=2)
    idx = torch.randint(0, 11, (2, 8))
    net(idx, torch.tensor([[0] * 3 + [1] * 5, [2] * 8])).sum().backward()  # packed rows, one with a boundary
    net(idx).sum().backward()
    assert counter.calls == []
    made: list[Any] = []
    real_as_tensor = torch.as_tensor
    monkeypatch.setattr(torch, "as_tensor", lambda *a, **k: made.append(a) or real_as_tensor(*a, **k))
    dm = ImageDataModule.__new__(ImageDataModule)
    dm._mean, dm._std, dm._stats_cache = [0.5], [0.25], None  # built without __init__: its declared cache too
    for _ in range(3):
        out = dm.normalize(torch.ones(2, 1, 4, 4))
    assert len(made) == 2 and torch.allclose(out, torch.full_like(out, 2.0)) and counter.calls == []
