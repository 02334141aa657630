"""Every use of a private name of Lightning or Hydra, in one place.

litforge reaches into a library's internals only where no public API does the job. Each function below wraps one
such use, says why it is needed and which upstream issue would make it unnecessary, and has a test in
tests/test_compat.py that fails with a message naming the entry when a new Lightning or Hydra release renames or
removes the name. No other module of `src/` touches a private Lightning or Hydra name (tests/test_compat.py also
checks that).

Imports of Lightning happen inside the functions: the CLI imports this module for the Hydra entries and must stay
free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# ---- Lightning -----------------------------------------------------------------------------------------------------


def attached_trainer(module: Any) -> Any:
    """The Trainer `module` (a LightningModule) is attached to, or None.

    `LightningModule.trainer` raises when no trainer is attached (a task built for eval/predict, or in a notebook),
    and Lightning has no public "is attached" test. Upstream: Lightning-AI/pytorch-lightning#17517.
    """
    return module._trainer


def logs_this_step(trainer: Any) -> bool:
    """Whether the loggers write the step metrics of the training step in progress.

    Lightning decides this in its logger connector (`log_every_n_steps`, the last step) and exposes no public
    accessor, so a task that wants to skip `self.log` on the steps nobody writes (each call costs hundreds of Python
    calls) asks it here. Answers True (log every step: correct, only slower) if the name disappears.
    Upstream: no public API; see the `should_update_logs` property in
    pytorch_lightning/trainer/connectors/logger_connector/logger_connector.py.
    """
    return bool(getattr(getattr(trainer, "_logger_connector", None), "should_update_logs", True))


@contextmanager
def counted_optimizer_step(lightning_optimizer: Any) -> Iterator[None]:
    """Run one raw `optimizer.step()` inside, with Lightning's step counters advanced around it.

    Under manual optimization Lightning counts `trainer.global_step` through hooks it injects into the
    LightningOptimizer (`_on_before_step` / `_on_after_step`); calling the raw optimizer (to skip Lightning's
    per-step closure and hooks, which is the point of steps_per_call) needs the same two calls.
    Upstream: Lightning-AI/pytorch-lightning#17958 (global_step under manual optimization).
    """
    lightning_optimizer._on_before_step()
    yield
    lightning_optimizer._on_after_step()


def advance_logger_step(trainer: Any, steps: int) -> None:
    """Move the loggers' x-axis on by `steps` (Lightning moves it by one per training step).

    Lightning's loggers use the fit loop's `_batches_that_stepped`, not `global_step`, as their step; when one
    training step runs several optimizer steps, the curves line up with checkpoint names (and with runs of one step
    per call) only if it counts optimizer steps too. Upstream: Lightning-AI/pytorch-lightning#11805 introduced the
    counter; #17958 is the open report of steps drifting under manual optimization.
    """
    epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    if epoch_loop is not None and hasattr(epoch_loop, "_batches_that_stepped"):
        epoch_loop._batches_that_stepped += steps


def route_hydra_relaunch(command: Callable[[int], tuple[Sequence[str], str]]) -> None:
    """Make Lightning start DDP ranks 1..N-1 of a Hydra job with `command(local_rank) -> (argv, cwd)`.

    Lightning's `_SubprocessScriptLauncher` builds the rank command in the module-level `_hydra_subprocess_cmd`,
    which repeats `sys.argv`: under a multirun every rank would start a sweep of its own. There is no public hook
    to replace it. Upstream: Lightning-AI/pytorch-lightning#18175 (open, "Hydra + DDP improvements", fixing #16694)
    and facebookresearch/hydra#2070.
    """
    from lightning_fabric.strategies.launchers import subprocess_script as fabric_launcher
    from pytorch_lightning.strategies.launchers import subprocess_script as trainer_launcher

    fabric_launcher._hydra_subprocess_cmd = command
    trainer_launcher._hydra_subprocess_cmd = command  # the Trainer's launcher imported its own reference


@contextmanager
def tracing_lightning_module() -> Iterator[None]:
    """Let `torch.jit.trace` (TensorBoard's graph) run a LightningModule's forward outside the loop.

    Lightning's own `to_torchscript` enters the private `_jit_is_scripting` context for this (properties such as
    `trainer` then do not raise while the tracer inspects the module). Upstream: pytorch/pytorch#67146, named in
    Lightning's source as the reason for the workaround.
    """
    from pytorch_lightning.core.module import _jit_is_scripting

    with _jit_is_scripting():
        yield


def fill_auto_mesh_sizes(strategy: Any, world_size: int) -> None:
    """Resolve `auto` in a ModelParallelStrategy's sizes from the world size, before its device mesh is built.

    Lightning reads `data_parallel_size: auto` as "the number of nodes", so FSDP over 2 processes of one machine
    would need the size spelled out; here `auto` fills whatever the other dimension leaves. The sizes live only in
    the private `_data_parallel_size` / `_tensor_parallel_size` attributes. Upstream: no issue filed; the meaning
    of `auto` is documented in ModelParallelStrategy's docstring.
    """
    dp, tp = strategy._data_parallel_size, strategy._tensor_parallel_size
    if dp == "auto" and tp != "auto":
        strategy._data_parallel_size = max(1, world_size // int(tp))
    elif tp == "auto" and dp != "auto":
        strategy._tensor_parallel_size = max(1, world_size // int(dp))


def skip_sigterm_broadcast(trainer: Any) -> None:
    """Stop `trainer`'s fit loop from broadcasting a SIGTERM flag from rank 0 before every training batch.

    Lightning's training epoch loop calls the private `_broadcast_sigterm_tensor` at the start of every batch
    whenever a process group exists: a collective per step, so every rank waits for the slowest one, which defeats
    asynchronous (Hogwild) training. Replaced on this trainer's loop instance only, by a local check: each rank stops
    when it received SIGTERM itself (a scheduler signals every process of a job). There is no public switch.
    Upstream: Lightning-AI/pytorch-lightning#21487 (the per-step broadcast; no option to turn it off).
    """
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    epoch_loop = trainer.fit_loop.epoch_loop
    if not callable(getattr(type(epoch_loop), "_broadcast_sigterm_tensor", None)):
        raise RuntimeError("litforge.compat.skip_sigterm_broadcast: Lightning's _TrainingEpochLoop has no "
                           "_broadcast_sigterm_tensor any more; see the entry's docstring")

    def local_sigterm_check() -> None:
        if getattr(trainer, "received_sigterm", False):
            raise SIGTERMException()

    epoch_loop._broadcast_sigterm_tensor = local_sigterm_check


def pruning_targets(callback: Any) -> Any:
    """The (module, parameter name) pairs a Lightning `ModelPruning` callback prunes."""
    return callback._parameters_to_prune


def set_pruning_targets(callback: Any, targets: Any) -> None:
    """Point a `ModelPruning` callback at `targets`, (module, parameter name) pairs.

    ModelPruning picks its targets once, in `setup`, into the private `_parameters_to_prune`, and has no setter;
    litforge's pruning callback refreshes them each epoch because QAT may have replaced the modules since (and
    clears them before `setup` so that every stage selects afresh). Upstream: no issue filed.
    """
    callback._parameters_to_prune = targets


# ---- Hydra ---------------------------------------------------------------------------------------------------------


def override_value_text(value: Any) -> str:
    """A parsed override value written back as Hydra override text (`[1,2]`, `'a b'`, `null`, ...).

    Hydra's own sweepers (basic, Optuna) use the private `Override._get_value_element_as_str` for this; it is the
    only writer that round-trips through Hydra's override grammar. Upstream: facebookresearch/hydra#1811 (fixed in
    the Optuna sweeper by calling the same private method, PR #1818).
    """
    from hydra.core.override_parser.types import Override

    return Override._get_value_element_as_str(value)
