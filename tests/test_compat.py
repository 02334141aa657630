"""litforge.runtime.compat holds every private Lightning/Hydra name litforge uses; these tests fail, naming the entry,
when a new release renames one, and keep private names from creeping into the rest of src/."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LIBRARIES = ("pytorch_lightning", "lightning_fabric", "lightning", "hydra", "omegaconf")
PUBLIC_UNDERSCORED = {
    "os._exit"
}  # documented Python API despite the underscore (litforge.runtime.watchdog ends a hung process)


def _renamed(entry: str, what: str) -> str:
    return (
        f"litforge.runtime.compat.{entry}: {what} is gone in the installed version; read that entry's docstring, find "
        "the new name (or the public API that replaced it) and update litforge/runtime/compat.py"
    )


# ---- every private name compat relies on still exists -------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [[], ["trainer.accumulate_grad_batches=2"], ["steps_per_call=3"], ["trainer.log_every_n_steps=1"]],
    ids=["default", "accumulate", "steps_per_call", "every_step"],
)
def test_the_public_logging_decision_equals_lightnings_at_every_step(overrides, compose_cfg):
    """runtime.host_reads.writes_step_metrics (public trainer state) against Lightning's own private decision
    (`_LoggerConnector.should_update_logs`, read here in a test only), at every training batch of real runs, as the
    task and the NaN guard ask it: in the training step and at the batch end. Fails loudly when Lightning changes
    its rule."""
    import pytorch_lightning as pl

    from litforge.jobs.train import train
    from litforge.runtime.host_reads import writes_step_metrics

    seen: list[tuple[int, bool, bool]] = []

    class Compare(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.start = trainer.global_step

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            lightning = trainer._logger_connector.should_update_logs
            seen.append((trainer.global_step, writes_step_metrics(trainer, self.start), lightning))
            assert pl_module.logs_this_step() == lightning

    cfg = compose_cfg(
        "print_config=false",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=13",
        "trainer.limit_val_batches=1",
        "test_after_training=false",
        "logger=csv",
        "callbacks.progress_bar=null",
        "trainer.log_every_n_steps=4",
        *overrides,
        "+callbacks.compare._target_=test_compat.Compare",
    )
    globals()["Compare"] = Compare
    train(cfg)
    assert len(seen) >= 8 and any(lightning for _, _, lightning in seen), seen
    assert [mine for _, mine, _ in seen] == [lightning for _, _, lightning in seen], seen


def test_the_public_trainer_property_answers_none_when_detached():
    """tasks.base.attached_trainer relies on Lightning's `trainer` property raising RuntimeError when detached."""
    from pytorch_lightning import LightningModule

    from litforge.tasks.task import attached_trainer

    assert attached_trainer(LightningModule()) is None


def test_loggers_record_the_hparams_as_fit_starts():
    """core.hparams overrides the public `hparams_initial`, the property Lightning's loggers read at fit start."""
    import pytorch_lightning as pl
    from pytorch_lightning.loggers import CSVLogger

    from litforge.core.hparams import HparamsAtFitStart

    class Module(HparamsAtFitStart, pl.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

    module = Module()
    module.hparams["lr"] = 0.5  # what a finder does before fit
    assert module.hparams_initial["lr"] == 0.5
    logged = {}

    class Recording(CSVLogger):
        def log_hyperparams(self, params, *args, **kwargs):  # noqa: ANN001
            logged.update(params)

    from pytorch_lightning.loggers.utilities import _log_hyperparams

    trainer = pl.Trainer(logger=Recording("unused"), barebones=False, enable_progress_bar=False, max_epochs=0)
    trainer.strategy.connect(module)
    module.trainer = trainer
    _log_hyperparams(trainer)
    assert logged.get("lr") == 0.5, logged


def test_lightning_optimizer_step_counters_and_logger_step():
    import torch
    from pytorch_lightning.core.optimizer import LightningOptimizer
    from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop

    from litforge.runtime import compat

    optimizer = LightningOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1))
    assert callable(getattr(optimizer, "_on_before_step", None)) and callable(
        getattr(optimizer, "_on_after_step", None)
    ), _renamed("counted_optimizer_step", "LightningOptimizer._on_before_step/_on_after_step")
    calls = []
    optimizer._on_before_step, optimizer._on_after_step = (
        (lambda: calls.append("before")),
        (lambda: calls.append("after")),
    )
    with compat.counted_optimizer_step(optimizer):
        calls.append("step")
    assert calls == ["before", "step", "after"]
    assert "_batches_that_stepped" in inspect.getsource(_TrainingEpochLoop.__init__), _renamed(
        "advance_logger_step", "_TrainingEpochLoop._batches_that_stepped"
    )


def test_ddp_module_sync_ignore_list():
    """Lightning's rank-0 broadcast before validate/test reads torch DDP's ignore list (strategy=pipeline with stages
    built on meta leaves the net out of it); tests/test_pipeline.py's CLI runs test after training that way."""
    import torch
    from pytorch_lightning.overrides.distributed import _sync_module_states

    from litforge.runtime import compat

    module = torch.nn.Linear(2, 2)
    compat.skip_in_module_sync(module, ["weight"])
    assert module._ddp_params_and_buffers_to_ignore == ["weight"]
    assert "_ddp_params_and_buffers_to_ignore" in inspect.getsource(_sync_module_states), _renamed(
        "skip_in_module_sync", "pytorch_lightning.overrides.distributed._sync_module_states's ignore list"
    )


def test_lightning_sigterm_handler_and_per_step_broadcast():
    """agree_on_sigterm_every replaces the handler Lightning registers and the loop's per-step broadcast: both must
    still be looked up by name at the moment Lightning uses them, or the replacement silently does nothing."""
    from pytorch_lightning import Trainer
    from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

    from litforge.runtime import compat

    entry = "agree_on_sigterm_every"
    assert "self._sigterm_notifier_fn" in inspect.getsource(_SignalConnector.register_signal_handlers), _renamed(
        entry, "_SignalConnector._sigterm_notifier_fn (registered as the SIGTERM handler)"
    )
    assert "self._broadcast_sigterm_tensor()" in inspect.getsource(_TrainingEpochLoop.advance), _renamed(
        entry, "_TrainingEpochLoop._broadcast_sigterm_tensor (called before each DDP step)"
    )
    assert isinstance(getattr(_SignalConnector(None), "received_sigterm", None), bool), _renamed(
        entry, "_SignalConnector.received_sigterm"
    )
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    agree = compat.agree_on_sigterm_every(trainer, 4)
    assert trainer.fit_loop.epoch_loop.batch_progress.total.ready == 0, _renamed(entry, "batch_progress.total.ready")
    trainer._signal_connector._sigterm_notifier_fn(15, None)  # one process: the flag is set at once, as Lightning does
    assert trainer.received_sigterm and agree()
    replaced = trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor
    compat.skip_sigterm_broadcast(trainer)  # hogwild's configure_ddp, after the callback's setup: the agreement stays
    assert trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor is replaced


def test_lightning_preemption_signal_handling():
    """The pre-emption signal (CheckpointOnSignal.requeue_signal) relies on three Lightning facts: its own SLURM
    SIGUSR1 handler is registered only with auto_requeue (trainer=slurm turns it off); the handlers found when fit
    registers its own are put back at teardown (so the callback's handler, installed at on_train_start, is gone after
    fit on every path); and the agreement's `note(requeue=True)` stops a single process at once, as SIGTERM does."""
    import signal as _signal

    from pytorch_lightning import Trainer
    from pytorch_lightning.trainer.connectors.signal_connector import _SignalConnector

    from litforge.runtime import compat

    entry = "agree_on_sigterm_every (StopAgreement.note)"
    register = inspect.getsource(_SignalConnector.register_signal_handlers)
    assert "environment.auto_requeue" in register and "_slurm_sigusr_handler_fn" in register, _renamed(
        entry, "the auto_requeue condition on Lightning's SLURM SIGUSR1 handler"
    )
    assert "_original_handlers" in register and "_original_handlers" in inspect.getsource(_SignalConnector.teardown), (
        _renamed(entry, "_SignalConnector restoring the pre-fit handlers at teardown")
    )
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    agreement = compat.agree_on_sigterm_every(trainer, 4)
    agreement.note(_signal.SIGUSR1, requeue=True)
    assert trainer.received_sigterm and agreement() and agreement.requeue


def test_lightning_hydra_relaunch_hook():
    from lightning_fabric.strategies.launchers import subprocess_script as fabric_launcher
    from pytorch_lightning.strategies.launchers import subprocess_script as trainer_launcher

    for module in (fabric_launcher, trainer_launcher):
        assert callable(getattr(module, "_hydra_subprocess_cmd", None)), _renamed(
            "route_hydra_relaunch", f"{module.__name__}._hydra_subprocess_cmd"
        )
        assert "_hydra_subprocess_cmd(" in inspect.getsource(module), _renamed(
            "route_hydra_relaunch", f"the call of _hydra_subprocess_cmd in {module.__name__}"
        )


def test_lightning_pruning_targets():
    from pytorch_lightning.callbacks import ModelPruning

    assert "self._parameters_to_prune" in inspect.getsource(ModelPruning), _renamed(
        "set_pruning_targets", "ModelPruning._parameters_to_prune"
    )


def test_lightning_per_batch_sigterm_broadcast():
    """The fit loop still broadcasts the SIGTERM flag before every batch (what hogwild turns off), and the local
    replacement still stops on this process's own SIGTERM."""
    import types

    import pytest as _pytest
    from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from litforge.runtime import compat

    assert callable(getattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor", None)), _renamed(
        "skip_sigterm_broadcast", "_TrainingEpochLoop._broadcast_sigterm_tensor"
    )
    assert "self._broadcast_sigterm_tensor()" in inspect.getsource(_TrainingEpochLoop.advance), _renamed(
        "skip_sigterm_broadcast", "the per-batch call of _broadcast_sigterm_tensor in advance()"
    )
    loop = type("Loop", (), {"_broadcast_sigterm_tensor": lambda self: None})()
    trainer = types.SimpleNamespace(fit_loop=types.SimpleNamespace(epoch_loop=loop), received_sigterm=False)
    compat.skip_sigterm_broadcast(trainer)
    loop._broadcast_sigterm_tensor()  # no collective, no stop
    trainer.received_sigterm = True
    with _pytest.raises(SIGTERMException):
        loop._broadcast_sigterm_tensor()


def test_lightning_restart_mid_evaluation_shape():
    """restart_validation_on_resume writes the batch progress Lightning reads as "restarted mid evaluation" (which
    re-runs the validation on resume); if Lightning changes that test, the resumed run would skip the validation."""
    from pytorch_lightning import Trainer
    from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop

    from litforge.runtime import compat

    entry = "restart_validation_on_resume"
    assert "self.val_loop.restarted_mid_evaluation" in inspect.getsource(_TrainingEpochLoop.advance), _renamed(
        entry, "_TrainingEpochLoop.advance's 'go back and finish running validation' branch"
    )
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    val_loop = trainer.fit_loop.epoch_loop.val_loop
    progress = val_loop.batch_progress
    progress.increment_by(9, True)  # one finished validation of 9 batches
    progress.current.reset()
    progress.increment_by(3, False)  # 3 batches into the next one, stopped there
    compat.restart_validation_on_resume(trainer)
    assert (progress.total.completed, progress.current.completed) == (9, 0)
    val_loop.restarting = True
    val_loop.update_restart_stage()
    assert val_loop.restarted_mid_evaluation, _renamed(entry, "_EvaluationLoop.update_restart_stage's conditions")


def test_gymnasium_time_limit_step_count():
    import gymnasium as gym

    from litforge.runtime import compat

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    assert compat.time_limit_elapsed(env) == 0, _renamed("time_limit_elapsed", "TimeLimit._elapsed_steps")
    env.step(0)
    env.step(1)
    assert compat.time_limit_elapsed(env) == 2, _renamed("time_limit_elapsed", "TimeLimit._elapsed_steps")
    compat.set_time_limit_elapsed(env, 499)  # the next step hits CartPole-v1's limit of 500: truncated
    _, _, terminated, truncated, _ = env.step(0)
    assert truncated and not terminated, _renamed("set_time_limit_elapsed", "TimeLimit._elapsed_steps")
    assert compat.time_limit_elapsed(gym.make("CartPole-v1", max_episode_steps=None).unwrapped) is None


# ---- no private library name outside compat -----------------------------------------------------------------------
def _private(name: str) -> bool:
    """`_x`, not a dunder and not a Hydra config key such as `_target_`; litforge's own markers are `_litforge*`."""
    return name.startswith("_") and not name.endswith("_") and not name.startswith("_litforge")


def _library_classes_of(cls: type) -> list[type]:
    return [base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in LIBRARIES]


def test_private_library_names_appear_only_in_compat():
    import importlib

    offences = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "compat.py" and path.parent.name == "runtime":
            continue
        tree = ast.parse(path.read_text())
        rel = path.relative_to(SRC)
        for node in ast.walk(tree):
            # from pytorch_lightning._internal import x / from hydra.core import _private
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
                if any(_private(part) for part in node.module.split(".")) or any(_private(a.name) for a in node.names):
                    offences.append(f"{rel}:{node.lineno} imports {ast.unparse(node)}")
            # something._private, except self./cls. (checked per class below)
            if isinstance(node, ast.Attribute) and _private(node.attr) and ast.unparse(node) not in PUBLIC_UNDERSCORED:
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    offences.append(f"{rel}:{node.lineno} uses {ast.unparse(node)}")
        # classes that extend a library class: self._x must be their own attribute, not the library's
        module_name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if module_name.startswith("hydra_plugins"):
            continue  # imported by Hydra's plugin discovery only
        module = importlib.import_module(module_name)
        for cls_node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            cls = getattr(module, cls_node.name, None)
            bases = _library_classes_of(cls) if isinstance(cls, type) else []
            if not bases:
                continue
            library_source = "\n".join(inspect.getsource(b) for b in bases if b.__module__ != "builtins")
            for node in ast.walk(cls_node):
                name = None
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    name = node.attr
                elif isinstance(node, ast.FunctionDef):
                    name = node.name
                if name and _private(name) and re.search(rf"\bself\.{name}\b|\bdef {name}\(", library_source):
                    offences.append(f"{rel}:{node.lineno} {cls_node.name} uses the library's private {name}")
    assert not offences, "private Lightning/Hydra names outside litforge/runtime/compat.py:\n" + "\n".join(offences)


def test_the_scan_catches_a_private_name(tmp_path: Path):
    """The scan above would see `trainer._logger_connector` (the kind of use compat exists for)."""
    tree = ast.parse("def f(trainer):\n    return trainer._logger_connector\n")
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _private(n.attr)]
    assert [ast.unparse(n) for n in found] == ["trainer._logger_connector"]
    assert not _private("_target_") and not _private("__init__") and _private("_trainer")
    pytest.importorskip("pytorch_lightning")


def test_litdata_replays_a_restored_epoch_left_early_which_the_streaming_loader_fixes(tmp_path: Path):
    """LitData keeps `restore` set after `load_state_dict` until an epoch runs to its end, so an epoch left early
    (limit_train_batches) is replayed by every later iter() (litData#770). If this starts failing, LitData fixed it:
    drop litforge.data.streaming.resumable_loader_class and use StreamingDataLoader itself."""
    from litdata import StreamingDataLoader, StreamingDataset, optimize

    from litforge.data.streaming import resumable_loader_class

    optimize(
        fn=_identity_item,
        inputs=list(range(40)),
        output_dir=str(tmp_path / "d"),
        chunk_bytes="1MB",
        num_workers=1,
        start_method="fork",
        verbose=False,
    )

    def epochs_after_resume(loader_class: type) -> list[list[int]]:
        first = loader_class(StreamingDataset(str(tmp_path / "d"), shuffle=True, seed=1), batch_size=4)
        iterator = iter(first)
        next(iterator)
        state = first.state_dict()
        resumed = loader_class(StreamingDataset(str(tmp_path / "d"), shuffle=True, seed=1), batch_size=4)
        resumed.load_state_dict(state)
        assert resumed.restore is True  # the public flag the fix relies on
        seen = []
        for _ in range(3):  # three epochs, each left after two batches
            batches = iter(resumed)
            seen.append([int(i) for _ in range(2) for i in next(batches)])
            del batches
        return seen

    plain = epochs_after_resume(StreamingDataLoader)
    assert plain[1] == plain[2] == plain[0], "LitData no longer replays: its fix landed, drop litforge's subclass"
    fixed = epochs_after_resume(resumable_loader_class())
    assert fixed[0] == plain[0] and fixed[1] != fixed[0] and fixed[2] != fixed[1]


def _identity_item(index: int) -> int:
    return index


# The private Lightning/Hydra names compat.py still uses, each behind one entry above with its upstream issue:
# steps_per_call's optimizer-step counters (_on_before_step, _on_after_step, _batches_that_stepped), the Hydra
# relaunch command (_hydra_subprocess_cmd), the SIGTERM agreement (_broadcast_sigterm_tensor, _signal_connector,
# _sigterm_notifier_fn), ModelPruning's targets (_parameters_to_prune) and a failed Hydra job's exception
# (_return_value, read by records/sweeps.py and the Optuna sweeper before it moved here). A new one must replace one of
# these or come with a reason to raise the bound.
PRIVATE_NAMES_BOUND = 10  # 9 of Lightning and Hydra; torch DDP's ignore list (skip_in_module_sync)


def test_compat_uses_a_bounded_set_of_private_library_names():
    source = (SRC / "litforge" / "runtime" / "compat.py").read_text()
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# ---- gymnasium"))
    end = next((i for i, line in enumerate(lines) if line.startswith("# ---- Hydra")), len(lines))
    libraries = "\n".join(lines[:start] + lines[end:])  # gymnasium's and torch's (after it; their own test) do not
    names = set()
    for node in ast.walk(ast.parse(libraries)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.name for a in node.names if a.name.startswith("_"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            names.add(node.value)  # getattr(obj, "_name") / "_name" in vars(obj)
    assert len(names) <= PRIVATE_NAMES_BOUND, sorted(names)


def test_torch_fake_process_group_fake_tensors_dispatch_mode_and_group_sizes():
    """compat's torch entries (the dry run's machinery, litforge.parallel.dry_run): a fake 4-rank group in which this
    process is rank 1 and collectives return at once; fake tensors without storage; a dispatch mode that sees a
    c10d op with its boxed group; both group forms sized."""
    import torch
    import torch.distributed as dist

    from litforge.runtime import compat

    seen: list[int] = []

    class Sizes(compat.dispatch_mode_class()):  # type: ignore[misc]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if str(func.overloadpacket) == "c10d.allreduce_":
                seen.append(compat.group_size(args[1]))
            return func(*args, **(kwargs or {}))

    compat.init_fake_process_group(1, 4)
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (1, 4), _renamed("init_fake_process_group", "FakeStore")
        assert compat.group_size(dist.group.WORLD.group_name) == 4, _renamed("group_size", "_resolve_process_group")
        with compat.fake_tensor_mode():
            huge = torch.empty(2**20, 2**20)  # 4 TiB: only a shape
            assert type(huge).__name__ == "FakeTensor", _renamed("fake_tensor_mode", "FakeTensorMode")
            with Sizes():
                dist.all_reduce(torch.ones(3))
        assert seen == [4], _renamed("dispatch_mode_class", "TorchDispatchMode or c10d.allreduce_'s group argument")
    finally:
        dist.destroy_process_group()


def test_storage_resizes_are_seen_inside_and_the_original_is_back_after():
    """The dry run's one process-wide patch (compat.storage_resizes_seen): inside, each resize is seen; after it,
    also after an error, `torch.UntypedStorage.resize_` is torch's own again."""
    import torch

    from litforge.runtime import compat

    original = torch.UntypedStorage.resize_
    seen: list[int] = []
    storage = torch.zeros(4).untyped_storage()
    with compat.storage_resizes_seen(lambda s, n: seen.append(n)):
        assert torch.UntypedStorage.resize_ is not original
        storage.resize_(0)
        storage.resize_(16)
    assert seen == [0, 16] and storage.nbytes() == 16
    assert torch.UntypedStorage.resize_ is original
    with pytest.raises(RuntimeError, match="boom"), compat.storage_resizes_seen(lambda s, n: None):
        raise RuntimeError("boom")
    assert torch.UntypedStorage.resize_ is original
    storage.resize_(8)
    assert seen == [0, 16]  # nothing seen outside


def test_hydra_failed_job_exception():
    """compat.job_error reads what a failed Hydra job raised, without the stderr line `return_value` writes."""
    from hydra.core.utils import JobReturn, JobStatus

    from litforge.runtime import compat

    failed = JobReturn(status=JobStatus.FAILED, _return_value=ValueError("bad lr"))
    assert isinstance(compat.job_error(failed), ValueError), _renamed("job_error", "JobReturn._return_value")
    with pytest.raises(ValueError, match="bad lr"):
        _ = failed.return_value  # what job_error avoids: the public getter re-raises
    assert compat.job_error(JobReturn(status=JobStatus.COMPLETED, _return_value=0.5)) is None


def test_activation_checkpointing_is_taken_off_for_a_count_and_put_back():
    """compat.recompute_in_backward (idempotent) and compat.without_recompute: inside, the class's forward runs;
    after it, also after an error, the unit recomputes again. Nothing else in src/ assigns a method onto an object
    (the scan below)."""
    import torch

    from litforge.runtime import compat

    unit = torch.nn.Linear(3, 3)
    net = torch.nn.Sequential(unit, torch.nn.ReLU())
    compat.recompute_in_backward(unit)
    compat.recompute_in_backward(unit)
    assert compat.is_checkpointed(unit) and not compat.is_checkpointed(net)
    with compat.without_recompute(net):
        assert "forward" not in vars(unit)
    assert compat.is_checkpointed(unit)
    with pytest.raises(RuntimeError, match="boom"), compat.without_recompute(net):
        raise RuntimeError("boom")
    assert compat.is_checkpointed(unit)
    x = torch.randn(2, 3, requires_grad=True)
    net(x).sum().backward()  # still trains through the recompute
    assert x.grad is not None


def test_no_method_is_assigned_onto_an_object_outside_compat():
    """`obj.forward = ...`, `setattr(obj, name, ...)` of a method, `Class.method = ...`: only runtime/compat.py may
    (issue #49: what runs is what the classes say). Assignments to `self.x` in a class's own methods are its state."""
    methods = {"forward", "training_step", "validation_step", "test_step", "predict_step", "resize_"}
    methods |= {f"{split}_dataloader" for split in ("train", "val", "test", "predict")}
    offences = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "compat.py" and path.parent.name == "runtime":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in methods:
                    offences.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(target)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and len(node.args) == 3:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value in methods:
                    offences.append(f"{path.relative_to(SRC)}:{node.lineno} {ast.unparse(node)}")
    assert not offences, "methods assigned onto objects outside litforge/runtime/compat.py:\n" + "\n".join(offences)
