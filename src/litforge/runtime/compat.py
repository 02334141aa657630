"""Every use of a private name of Lightning or Hydra, in one place.

litforge reaches into a library's internals only where no public API does the job. Each function below wraps one
such use, says why it is needed and which upstream issue would make it unnecessary, and has a test in
tests/test_compat.py that fails with a message naming the entry when a new Lightning or Hydra release renames or
removes the name. No other module of `src/` touches a private Lightning or Hydra name (tests/test_compat.py also
checks that).

Imports of torch and Lightning happen inside the functions: the torch-free tools (records.sweeps' summary, read by
`python -m litforge.records.aggregate`, and the Hydra sweeper) import this module for the Hydra entry, and must not
pay torch's ~1.5 s start-up. The annotations name the libraries' types under TYPE_CHECKING only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar, overload

if TYPE_CHECKING:
    import signal
    from types import FrameType

    import pytorch_lightning as pl
    import torch
    from gymnasium import Env
    from gymnasium.wrappers import TimeLimit
    from hydra.core.utils import JobReturn
    from pytorch_lightning.callbacks import ModelPruning
    from pytorch_lightning.core.optimizer import LightningOptimizer
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.pipelining import ScheduleInterleaved1F1B, ScheduleZBVZeroBubble
    from torch.utils._python_dispatch import TorchDispatchMode

    Schedule = TypeVar("Schedule", bound=ScheduleInterleaved1F1B | ScheduleZBVZeroBubble)

# ---- Lightning -----------------------------------------------------------------------------------------------------


@contextmanager
def counted_optimizer_step(lightning_optimizer: LightningOptimizer) -> Iterator[None]:
    """Run one raw `optimizer.step()` inside, with Lightning's step counters advanced around it.

    Under manual optimization Lightning counts `trainer.global_step` through hooks it injects into the
    LightningOptimizer (`_on_before_step` / `_on_after_step`); calling the raw optimizer (to skip Lightning's
    per-step closure and hooks, which is the point of steps_per_call) needs the same two calls.
    Upstream: Lightning-AI/pytorch-lightning#17958 (global_step under manual optimization).
    """
    lightning_optimizer._on_before_step()
    yield
    lightning_optimizer._on_after_step()


def advance_logger_step(trainer: pl.Trainer, steps: int) -> None:
    """Move the loggers' x-axis on by `steps` (Lightning moves it by one per training step).

    Lightning's loggers use the fit loop's `_batches_that_stepped`, not `global_step`, as their step; when one
    training step runs several optimizer steps, the curves line up with checkpoint names (and with runs of one step
    per call) only if it counts optimizer steps too. Upstream: Lightning-AI/pytorch-lightning#11805 introduced the
    counter; #17958 is the open report of steps drifting under manual optimization.
    """
    trainer.fit_loop.epoch_loop._batches_that_stepped += steps


class RankCommand(Protocol):
    """Lightning calls its `_hydra_subprocess_cmd` with the keyword `local_rank=`: a replacement keeps that name."""

    def __call__(self, local_rank: int) -> tuple[Sequence[str], str]: ...


def route_hydra_relaunch(command: RankCommand) -> None:
    """Make Lightning start DDP ranks 1..N-1 of a Hydra job with `command(local_rank) -> (argv, cwd)`.

    Lightning's `_SubprocessScriptLauncher` builds the rank command in the module-level `_hydra_subprocess_cmd`,
    which repeats `sys.argv`: under a multirun every rank would start a sweep of its own. There is no public hook
    to replace it. Upstream: Lightning-AI/pytorch-lightning#18175 (open, "Hydra + DDP improvements", fixing #16694)
    and facebookresearch/hydra#2070.
    """
    from lightning_fabric.strategies.launchers import subprocess_script as fabric_launcher  # torch-free importers
    from pytorch_lightning.strategies.launchers import subprocess_script as trainer_launcher  # torch-free importers

    fabric_launcher._hydra_subprocess_cmd = command
    trainer_launcher._hydra_subprocess_cmd = command  # the Trainer's launcher imported its own reference


def skip_sigterm_broadcast(trainer: pl.Trainer) -> None:
    """Stop `trainer`'s fit loop from broadcasting a SIGTERM flag from rank 0 before every training batch.

    Lightning's training epoch loop calls the private `_broadcast_sigterm_tensor` at the start of every batch
    whenever a process group exists: a collective per step, so every rank waits for the slowest one, which defeats
    asynchronous (Hogwild) training. Replaced on this trainer's loop instance only, by a local check: each rank stops
    when it received SIGTERM itself (a scheduler signals every process of a job). There is no public switch.
    Upstream: Lightning-AI/pytorch-lightning#21487 (the per-step broadcast; no option to turn it off).
    """
    from pytorch_lightning.utilities.exceptions import SIGTERMException  # torch-free importers (docstring)

    epoch_loop = trainer.fit_loop.epoch_loop
    if "_broadcast_sigterm_tensor" in vars(epoch_loop):  # already replaced by agree_on_sigterm_every (the SIGTERM
        return  # checkpoint callback): its rare agreement stays, or a SIGTERM would never stop this rank
    # a probe of the private name: a Lightning without it gets this entry's name, not an AttributeError deep in fit
    if not callable(getattr(type(epoch_loop), "_broadcast_sigterm_tensor", None)):
        raise RuntimeError(
            "litforge.runtime.compat.skip_sigterm_broadcast: Lightning's _TrainingEpochLoop has no "
            "_broadcast_sigterm_tensor any more; see the entry's docstring"
        )

    def local_sigterm_check() -> None:
        if trainer.received_sigterm:
            raise SIGTERMException()

    epoch_loop._broadcast_sigterm_tensor = local_sigterm_check  # type: ignore[method-assign]  # the entry's patch


def pruning_targets(callback: ModelPruning) -> Sequence[tuple[nn.Module, str]]:
    """The (module, parameter name) pairs a Lightning `ModelPruning` callback prunes."""
    return callback._parameters_to_prune


def set_pruning_targets(callback: ModelPruning, targets: Sequence[tuple[nn.Module, str]]) -> None:
    """Point a `ModelPruning` callback at `targets`, (module, parameter name) pairs.

    ModelPruning picks its targets once, in `setup`, into the private `_parameters_to_prune`, and has no setter;
    litforge's pruning callback refreshes them each epoch because QAT may have replaced the modules since (and
    clears them before `setup` so that every stage selects afresh). Upstream: no issue filed.
    """
    callback._parameters_to_prune = targets


def agree_on_sigterm_every(trainer: pl.Trainer, every_n: int) -> StopAgreement:
    """Replace Lightning's SIGTERM handling under DDP so that no collective runs per step; returns the agreement.

    Lightning 2.6 broadcasts a SIGTERM flag from rank 0 before *every* DDP training step
    (`_TrainingEpochLoop._broadcast_sigterm_tensor`: 0.37 ms per step per rank on gloo, a host sync on NCCL), and its
    handler (`_SignalConnector._sigterm_notifier_fn`) itself calls `dist.broadcast` inside the signal handler, matched
    only by the other ranks' per-step broadcast: thinning out one alone hung a 2-rank job. Both are replaced here:

    - the handler only notes the signal (and, on a launcher rank, forwards it to the ranks it started, as Lightning
      does); under several ranks it leaves `trainer.received_sigterm` alone, so no rank stops on its own;
    - the per-step broadcast becomes one tiny all-reduce (max) before every `every_n`-th training batch (counted by
      the loop's total batch progress, the same on every rank, across resumes) and when the agreement is called (the
      on-signal callback calls it at each epoch end); when any rank got SIGTERM, every rank sets
      `received_sigterm` and raises Lightning's SIGTERMException at that same batch.

    A pre-emption signal (SIGUSR1, see litforge.callbacks.fault_tolerance.CheckpointOnSignal) is noted the same way
    with `StopAgreement.note(signum, requeue=True)`; the same all-reduce carries it, so every rank stops at the same
    batch and all of them know the job is to be requeued, whichever rank the signal reached.

    Single process: the handler sets `received_sigterm` at once, as Lightning's does (the loop stops at the next
    batch). Upstream: Lightning-AI/pytorch-lightning#21487 (the per-step broadcast).
    """
    return StopAgreement(trainer, every_n)


class StopAgreement:
    """The ranks' shared decision to stop (SIGTERM) or to stop and requeue (a pre-emption signal).

    `note` is what runs inside a signal handler: it sets flags and never calls a collective, saves or requeues
    (another rank may be inside DDP's backward or a barrier at that moment: a collective there hangs the job).
    Calling the agreement (`agreement()`, every rank at the same point) all-reduces the flags once and returns
    whether to stop; `requeue` then says whether any rank got the pre-emption signal.
    """

    def __init__(self, trainer: pl.Trainer, every_n: int) -> None:
        from pytorch_lightning.utilities.exceptions import SIGTERMException  # torch-free importers (docstring)

        self.trainer = trainer
        self.connector = trainer._signal_connector
        self.pending = False  # this rank got a stop signal; not agreed on yet
        self.pending_requeue = False  # this rank got the pre-emption signal; not agreed on yet
        self.requeue = False  # agreed: the job is to be requeued after the save
        self.forwarded = False  # SIGTERM passed on to the ranks this process launched
        epoch_loop = trainer.fit_loop.epoch_loop

        def check_before_batch() -> None:  # called by the loop before each batch under several ranks
            if epoch_loop.batch_progress.total.ready % every_n == 0 and self():
                raise SIGTERMException()

        self.connector._sigterm_notifier_fn = self.on_sigterm  # type: ignore[method-assign,assignment]  # fit reads it
        epoch_loop._broadcast_sigterm_tensor = check_before_batch  # type: ignore[method-assign]  # the entry's patch

    def several_ranks(self) -> bool:
        import torch.distributed as dist  # torch-free importers (docstring)

        return dist.is_available() and dist.is_initialized() and self.trainer.world_size > 1

    def on_sigterm(self, signum: int | signal.Signals, _frame: FrameType | None) -> None:
        """Lightning's SIGTERM handler, replaced: note the signal, forward it to the ranks this one started."""
        from pytorch_lightning.utilities.rank_zero import rank_prefixed_message  # torch-free importers (docstring)

        logging.getLogger("pytorch_lightning").info(
            rank_prefixed_message(f"Received SIGTERM: {signum}", self.trainer.local_rank)
        )
        if not self.forwarded and self.trainer.strategy.launcher is not None:
            self.trainer.strategy.launcher.kill(signum)
        self.forwarded = True
        self.note(signum)

    def note(self, signum: int | signal.Signals, requeue: bool = False) -> None:
        """Inside a signal handler: remember it (flags only); the ranks act on it at their next agreement."""
        if requeue:
            self.pending_requeue = True
        if self.several_ranks():
            self.pending = True
        else:
            self.connector.received_sigterm = True
            self.requeue = self.requeue or requeue

    def __call__(self) -> bool:
        """All ranks: whether any rank got a stop signal (one all-reduce); if so, every rank's loop stops."""
        if not self.several_ranks():
            return bool(self.connector.received_sigterm)
        import torch.distributed  # torch-free importers; binds `torch` too

        flags = [int(self.pending or self.connector.received_sigterm), int(self.pending_requeue or self.requeue)]
        flag = torch.tensor(flags, device=self.trainer.strategy.root_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        stop, requeue = flag.tolist()
        if stop:
            self.connector.received_sigterm = True
        if requeue:
            self.requeue = True
        return bool(self.connector.received_sigterm)


def restart_validation_on_resume(trainer: pl.Trainer) -> None:
    """Make the next checkpoint of `trainer`, stopped mid-validation, resume by running that validation again in full.

    A SIGTERM during `fit`'s validation stops Lightning's evaluation loop after the current batch. Its loop state then
    says "training batch done, validation batches done": on resume Lightning takes that for a checkpoint written
    after validation (`RestartStage.RESTARTED_ON_LAST`) and skips the interrupted validation, so its metrics, the
    best-checkpoint choice and early stopping's count never see it. Lightning re-runs a validation on resume only
    when the checkpoint was written inside a validation step (`_EvaluationLoop.update_restart_stage`: one batch
    started, none processed since); this sets the validation loop's batch progress to exactly that shape, with the
    batches of earlier validations kept in the totals, so the resumed run validates from the first batch (validation
    state is not saved: metrics start empty, as in an uninterrupted run). Only for a trainer that is ending (the live
    counters change). Upstream: no issue filed; the restart stages are private to Lightning's loops.
    """
    progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
    before = progress.total.completed - progress.current.completed  # batches of the validations already finished
    for tracker, done in ((progress.total, before), (progress.current, 0)):
        # Lightning declares `total`/`current` as the base tracker; they hold its processed-counting subclass
        tracker.ready = tracker.started = done + 1  # type: ignore[attr-defined]
        tracker.processed = tracker.completed = done  # type: ignore[attr-defined]
    progress.is_last_batch = False


# ---- torch.distributed.pipelining ---------------------------------------------------------------------------------


def skip_in_module_sync(module: nn.Module | None, names: list[str]) -> None:
    """Leave the named parameters and buffers of `module` out of the rank-0 broadcast that Lightning's DDP strategy
    runs before validate / test / predict (`_sync_module_states`, which honours torch DDP's ignore list).

    strategy=pipeline with stages built on meta: each rank holds only its own stages' tensors (the others are meta),
    so a broadcast of the whole net from rank 0 would fail. The list is the attribute torch's
    `DistributedDataParallel._set_params_and_buffers_to_ignore_for_model` sets (private: Lightning's DDP strategy
    offers no public switch). Upstream: Lightning-AI/pytorch-lightning has no option to skip that sync.
    `module` is the strategy's `lightning_module`, None only before one is attached."""
    if module is None:
        raise RuntimeError("litforge.runtime.compat.skip_in_module_sync: the strategy holds no module yet")
    vars(module)["_ddp_params_and_buffers_to_ignore"] = list(names)  # a plain attribute, as torch's setter makes


def forward_only(schedule: Schedule) -> Schedule:
    """`schedule` (a multi-stage pipelining schedule) cut down to its forward actions and their sends and receives,
    for evaluation.

    On torch 2.14 `ScheduleZBVZeroBubble.eval()` still runs the schedule's backward actions with backward disabled,
    and the V's turn (two adjacent stages on one rank) then fails ("can't steal_bwd_input if this stage doesn't have
    backward"). The runtime executes its lowered action list, `pipeline_order_with_comms` (a public attribute, no
    private name); keeping its F, SEND_F and RECV_F actions gives a forward-only schedule over the same stage
    placement. Upstream: pytorch/pytorch `_PipelineScheduleRuntime.eval` does not skip backward actions;
    tests/test_pipeline.py checks the evaluation output against the whole net."""
    from torch.distributed.pipelining.schedules import FORWARD, RECV_F, SEND_F  # torch-free importers (docstring)

    schedule.pipeline_order_with_comms = {
        rank: [a for a in actions if a.computation_type in (FORWARD, SEND_F, RECV_F)]
        for rank, actions in schedule.pipeline_order_with_comms.items()
    }
    return schedule


# ---- activation checkpointing ---------------------------------------------------------------------------------------


def recompute_in_backward(unit: nn.Module) -> None:
    """Make `unit` (an nn.Module) recompute its activations in the backward pass: its `forward`, on this instance,
    runs its class's forward through `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`. Idempotent.

    The one method litforge assigns onto an object. torch's own ways do not fit yet, and both are private: the
    wrapper (`torch.distributed.algorithms._checkpoint.checkpoint_wrapper`) renames everything below the unit, which
    breaks the nets' tensor-parallel plans (keyed by name) and `fsdp_units()` picked by class; the composable
    `torch.distributed._composable.checkpoint` (forward hooks, names kept) registers local closures, so the task no
    longer pickles for `strategy=ddp_spawn`. Here names, state dicts and checkpoints are the plain net's, and the
    partial pickles. Upstream: pytorch/pytorch's composable checkpoint has no public home yet.
    :func:`without_recompute` takes it off for a while (the FLOP count); tests/test_compat.py checks both."""
    if not is_checkpointed(unit):
        unit.forward = functools.partial(_recomputed_forward, unit)


def is_checkpointed(unit: nn.Module) -> bool:
    """Whether :func:`recompute_in_backward` was applied to `unit`."""
    forward = vars(unit).get("forward")
    return isinstance(forward, functools.partial) and forward.func is _recomputed_forward


def _recomputed_forward(unit: nn.Module, *args: object, **kwargs: object) -> object:
    from torch.utils.checkpoint import checkpoint  # torch-free importers (docstring)

    # type(unit).forward: the class's own forward (FSDP2 swaps the class for a subclass that inherits it); the RNG
    # state is restored for the recompute (preserve_rng_state), so dropout masks match the first pass
    # (keywords bound first: the non-reentrant checkpoint recomputes any closure, tensors in it included)
    return checkpoint(functools.partial(type(unit).forward, unit, **kwargs), *args, use_reentrant=False)


@contextmanager
def without_recompute(net: nn.Module) -> Iterator[None]:
    """Inside, the checkpointed units of `net` run their class's forward once, as without activation checkpointing
    (what a count of model FLOPs needs); checkpointed again on exit, also after an error."""
    units = [m for m in net.modules() if is_checkpointed(m)]
    for unit in units:
        del unit.forward
    try:
        yield
    finally:
        for unit in units:
            recompute_in_backward(unit)


# ---- gymnasium -----------------------------------------------------------------------------------------------------


def time_limit_elapsed(env: Env) -> int | None:
    """The step count of `env`'s TimeLimit wrapper (how far into its episode's time limit it is), or None.

    An exact mid-episode resume of the DQN training env must restore it; gymnasium keeps it in the private
    `TimeLimit._elapsed_steps` with no public getter or setter (gymnasium/wrappers/common.py).
    """
    wrapper = _time_limit(env)
    return None if wrapper is None else wrapper._elapsed_steps  # None also before the env's first reset


def set_time_limit_elapsed(env: Env, steps: int) -> None:
    """Set what `time_limit_elapsed` reads (see there)."""
    wrapper = _time_limit(env)
    if wrapper is not None:
        wrapper._elapsed_steps = int(steps)  # type: ignore[assignment]  # gymnasium infers None from its __init__


def _time_limit(env: Env) -> TimeLimit | None:
    import gymnasium  # extra [rl]

    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            return env
        env = env.env
    return None


# ---- torch ---------------------------------------------------------------------------------------------------------
# The dry run (litforge.parallel.dry_run) simulates thousands of ranks on one CPU with torch's own test and tracing
# machinery, which torch keeps under private names; torchtitan's `comm.mode=fake_backend` uses the same ones.


def init_fake_process_group(rank: int, world_size: int) -> None:
    """A default process group of `world_size` ranks in which this process is `rank` and every collective returns
    at once without sending anything (torch's "fake" backend, registered by importing its test module; its store
    needs no other process). torch offers it only in `torch.testing._internal.distributed.fake_pg` (torchtitan's
    fake_backend mode imports it there too; pytorch/pytorch#124541 discusses a public home)."""
    import torch.distributed as dist  # torch-free importers (docstring)
    from torch.testing._internal.distributed.fake_pg import FakeStore  # torch-free importers (docstring)

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def fake_tensor_mode() -> FakeTensorMode:
    """A mode in which new tensors carry shape, dtype and device but no storage, and every op only computes the
    shapes of its results (`torch._subclasses.fake_tensor.FakeTensorMode`; public in spirit through
    `torch.export`, but not exported). Real tensors made before it (a meta net's shards) are allowed in."""
    from torch._subclasses.fake_tensor import FakeTensorMode  # torch-free importers (docstring)

    return FakeTensorMode(allow_non_fake_inputs=True)


def dispatch_mode_class() -> type[TorchDispatchMode]:
    """The base class of a mode that sees every aten and c10d op (`torch.utils._python_dispatch.TorchDispatchMode`,
    which torch's own CommDebugMode and memory trackers subclass; no public alias exists)."""
    from torch.utils._python_dispatch import TorchDispatchMode  # torch-free importers (docstring)

    return TorchDispatchMode


def group_size(group: object) -> int:
    """The ranks in a process group as a collective op carries it: a c10d op's boxed ProcessGroup, or a functional
    collective's group name (resolved by `torch.distributed.distributed_c10d._resolve_process_group`, the name
    functional collectives use internally; no public lookup by name exists)."""
    from torch import ScriptObject  # torch-free importers
    from torch.distributed.distributed_c10d import ProcessGroup, _resolve_process_group  # torch-free importers

    if isinstance(group, str):
        return int(_resolve_process_group(group).size())  # type: ignore[arg-type]  # GroupName is a str
    if not isinstance(group, ScriptObject):
        raise TypeError(f"not a process group as a collective op carries one: {group!r}")
    return int(ProcessGroup.unbox(group).size())


@contextmanager
def storage_resizes_seen(seen: Callable[[torch.UntypedStorage, int], None]) -> Iterator[None]:
    """Inside, every `torch.UntypedStorage.resize_(size)` first calls `seen(storage, size)`; torch's own method is
    back on exit, also after an error (tests/test_compat.py).

    FSDP2 frees and re-allocates its gathered weights by resizing their storages in place (`_fsdp_param`'s
    `free_storage` / `alloc_storage`); `resize_` is no dispatched op, so the dry run's dispatch mode
    (litforge.parallel.dry_run) would not see those bytes, and torch has no hook for it. The one process-wide patch
    litforge makes, for the duration of the dry run's count only."""
    import torch  # torch-free importers (docstring)

    original = torch.UntypedStorage.resize_

    def resize_(storage: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
        seen(storage, int(size))
        return original(storage, size)

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]


class ChunksByIndex(Sequence["torch.Tensor"]):
    """`torch.chunk(tensor, num_chunks, dim)` padded with empty tensors to `num_chunks` (FSDP2's
    `_chunk_with_empty`), each chunk made only when read: reading two of them costs the same at any `num_chunks`."""

    def __init__(self, tensor: torch.Tensor, num_chunks: int, dim: int) -> None:
        self.tensor, self.num_chunks, self.dim = tensor, num_chunks, dim
        self.size = int(tensor.size(dim))
        self.step = -(-self.size // num_chunks)  # torch.chunk's chunk size: ceil(size / num_chunks)

    def __len__(self) -> int:
        return self.num_chunks

    @overload
    def __getitem__(self, index: int) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> list[torch.Tensor]: ...

    def __getitem__(self, index: int | slice) -> torch.Tensor | list[torch.Tensor]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.num_chunks))]
        index = index + self.num_chunks if index < 0 else index
        if not 0 <= index < self.num_chunks:
            raise IndexError(index)
        start = index * self.step
        if self.size == 0:  # torch.chunk of an empty dimension: num_chunks empty views of the tensor
            return self.tensor.narrow(self.dim, 0, 0)
        if start >= self.size:  # past torch.chunk's last chunk: FSDP pads the list with these
            return self.tensor.new_empty(0)
        return self.tensor.narrow(self.dim, start, min(self.step, self.size - start))


def fsdp_chunks_by_index() -> None:
    """Make FSDP2's sharding of a parameter cost the same at any world size, in this (forked, dry-run) process only.

    `fully_shard` splits each parameter with `torch.distributed.fsdp._fully_shard._fsdp_common._chunk_with_empty`
    (private; imported by name into `_fsdp_param`), which makes one tensor per rank (`torch.chunk`, then an empty
    tensor per rank past the last chunk) and then reads only its own rank's chunk and chunk 0: 8,000 ranks x a 7B
    net's 291 parameters x 2 calls made ~4.6 million fake tensors (~110 s). :class:`ChunksByIndex` gives the same
    chunks, made when read (tests/test_dry_run.py compares them). No upstream issue: at a real run's world size the
    list costs nothing."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param  # torch-free importers (docstring)

    _fsdp_param._chunk_with_empty = ChunksByIndex  # type: ignore[assignment]


# ---- Hydra ---------------------------------------------------------------------------------------------------------


def job_error(job_return: JobReturn) -> BaseException | None:
    """The exception a failed Hydra job raised (or a refused sweep job returned: litforge.cli.main.run_job), or None.

    Hydra's `JobReturn` keeps it in the private `_return_value` (facebookresearch/hydra#1465, "Support partial
    failures in multirun mode"); its public `return_value` re-raises it and first writes "Error executing job with
    overrides: ..." to stderr, so a sweep that goes on past a failed job (records/sweeps.py's summary, the Optuna
    sweeper's failed trial) would print that line again for every job it reads. No public getter exists."""
    value = job_return._return_value
    return value if isinstance(value, BaseException) else None
