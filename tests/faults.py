"""Fault injection for the reliability tests, added to a real CLI run as `+callbacks.fault._target_=faults.<Name>`.

Each fault fires at an exact optimizer step, so a test knows where the run was interrupted (an external kill is
also tested, in tests/test_reliability.py, where timing does not matter).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import torch
from pytorch_lightning.callbacks import Callback

from litforge.checkpointing.io import wait_for_checkpoint_writes


class SignalAt(Callback):
    """Send `signal` (a name: SIGTERM, SIGKILL, ...) to this process after optimizer step `step` on rank `rank`;
    with `attempt`, only in that attempt of a torchrun job (its TORCHELASTIC_RESTART_COUNT: 0 = the first start).

    It first waits for the checkpoint writes still in flight (litforge fsyncs and renames them in a background
    thread), so the test knows which `last.ckpt` the signal leaves: without the wait a kill one step after a save
    raced its rename (seen in CI). A kill in the middle of a write is tested on its own
    (test_a_checkpoint_write_killed_halfway_leaves_the_previous_file_whole), and one inside the background rename
    with :class:`KillInBackgroundRename`."""

    def __init__(self, step: int, signal: str = "SIGTERM", rank: int | None = None, attempt: int | None = None) -> None:
        self.step, self.signal, self.rank, self.attempt = step, signal, rank, attempt

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.attempt is not None and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) != self.attempt:
            return
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            wait_for_checkpoint_writes()
            print(f"FAULT {self.signal} rank {trainer.global_rank} at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), getattr(signal, self.signal))


class PaceFirstAttempt(Callback):
    """Sleep `sleep` s after every training step of a SLURM job's first attempt (`SLURM_RESTART_COUNT` unset or 0);
    a requeued attempt runs at full speed.

    Why: a requeue test must requeue a job that is still running. Slurm requeues a finished batch job too, and the
    next attempt then rightly starts a new folder (`slurm-<id>.1`): CI once saw a 12-epoch job finish between its
    first checkpoint and the test's `scontrol requeue`. A sleep ends early on SIGTERM's handler, so the stop at the
    next step boundary is not delayed.
    """

    def __init__(self, sleep: float = 0.25) -> None:
        self.sleep = sleep

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if int(os.environ.get("SLURM_RESTART_COUNT") or 0) == 0:
            time.sleep(self.sleep)


class PaceAttempts(Callback):
    """Inside a SLURM job, sleep `sleep` s after every training step of its first `attempts` attempts
    (`SLURM_RESTART_COUNT` below `attempts`); a later attempt, and any run outside SLURM, runs at full speed.

    Why: a test of the pre-emption at the time limit needs a job longer than its limit (so slurmctld's signal finds
    it training) that still finishes within a test's minutes once requeued. A sleep changes no number the run
    computes, so the paced job ends with the metrics of the same run unpaced (its reference, run outside SLURM).
    """

    def __init__(self, sleep: float = 1.0, attempts: int = 1) -> None:
        self.sleep, self.attempts = sleep, attempts

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if os.environ.get("SLURM_JOB_ID") and int(os.environ.get("SLURM_RESTART_COUNT") or 0) < self.attempts:
            time.sleep(self.sleep)


class PoisonAt(Callback):
    """Make the weights NaN just before the batch of step `step`, so that step's loss is NaN."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


class HangAt(Callback):
    """After optimizer step `step`, ask for SIGTERM and then block forever, as a rank stuck in a collective does.

    The block is a lock acquired twice: the Python SIGTERM handler runs (Lightning sets its flag) and the wait goes
    on, so the loop never reaches the step boundary where it would stop (issue 18).
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            print(f"FAULT hang at {time.time():.3f}", flush=True)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            hang_forever()


def hang_forever() -> None:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # never returns


class SignalInValidation(Callback):
    """Slow the validation that runs at optimizer step `step` by `sleep` s per batch (a validation long enough to
    matter) and send `signal` to this process after its validation batch `batch`."""

    def __init__(self, step: int, batch: int = 0, sleep: float = 0.5, signal: str = "SIGTERM") -> None:
        self.step, self.batch, self.sleep, self.signal = step, batch, sleep, signal

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.sanity_checking or trainer.global_step != self.step:
            return
        time.sleep(self.sleep)
        if batch_idx == self.batch:
            print(f"FAULT {self.signal} in validation batch {batch_idx} at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), getattr(signal, self.signal))


class KillJobAt(Callback):
    """SIGKILL every process of the job at once (`kill -9 -<pgid>`, what a pre-empted node does) after optimizer step
    `step`, from global rank 0: the ranks Lightning launched share rank 0's process group.

    Refuses to fire unless rank 0 leads its own process group (tests/cli_server.py's children do, as `setsid` would
    make them), so a run started inside the test process's group can never kill the test runner.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and trainer.global_rank == 0:
            if os.getpgrp() != os.getpid():
                raise RuntimeError("KillJobAt: rank 0 does not lead its process group; start the run with setsid")
            print(f"FAULT kill -9 job at step {self.step} at {time.time():.3f}", flush=True)
            os.killpg(os.getpgrp(), signal.SIGKILL)


class KillJobDuringSave(Callback):
    """SIGKILL the whole job (as :class:`KillJobAt`) in the middle of writing `name` at optimizer step `step`: every
    rank's shards are written, but rank 0's `meta.pt` and the rename into place are not (a sharded save under
    strategy=fsdp/tp). Wraps `torch.distributed.checkpoint.save`, which Lightning looks up at each save."""

    def __init__(self, step: int, name: str = "last.ckpt") -> None:
        self.step, self.name = step, name

    def setup(self, trainer, pl_module, stage) -> None:
        import torch.distributed.checkpoint as dcp

        original, fault = dcp.save, self

        def save(state_dict, *args, checkpoint_id=None, **kwargs):
            result = original(state_dict, *args, checkpoint_id=checkpoint_id, **kwargs)
            if (
                trainer.global_rank == 0
                and trainer.global_step == fault.step
                and fault.name in os.path.basename(str(checkpoint_id))
            ):
                if os.getpgrp() != os.getpid():
                    raise RuntimeError("KillJobDuringSave: rank 0 does not lead its process group; use setsid")
                print(f"FAULT kill -9 job while saving {checkpoint_id} at step {fault.step}", flush=True)
                os.killpg(os.getpgrp(), signal.SIGKILL)
            return result

        dcp.save = save


class KillInBackgroundRename(Callback):
    """SIGKILL this process from inside litforge's background checkpoint thread (litforge.checkpointing.io, on by
    default: `trainer.plugins` with `durable_in_background=true`) while it makes durable the `name` file saved at
    optimizer step `step`: `when="before_rename"` after the file is fully written to `.<name>.partial` but before its
    fsync and rename; `when="after_rename"` after the rename, before the folder's fsync.

    This is the window tests/faults.py's SignalAt waits out. The kill is the real SIGKILL of the whole process; what
    the fault adds is only the moment: it wraps the module's `_make_durable` / `fsync_directory`, which the background
    thread looks up at each save, and fires only on that thread (`litforge-checkpoint-fsync`), so a save made in the
    foreground never triggers it and the run then ends normally (the test fails on its exit code)."""

    def __init__(self, step: int, when: str = "before_rename", name: str = "last.ckpt") -> None:
        if when not in ("before_rename", "after_rename"):
            raise ValueError(f"when={when!r}: before_rename or after_rename")
        self.step, self.when, self.name = step, when, name
        self.saving_step = -1

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.saving_step = trainer.global_step  # the training thread: which step the next write holds

    def setup(self, trainer, pl_module, stage) -> None:
        from litforge.checkpointing import io

        fault, in_background = self, io._in_background
        make_durable, fsync_directory = io._make_durable, io.fsync_directory
        local, armed = threading.local(), {}

        def wrapped_in_background(work) -> None:  # the training thread, at the save: the step the write holds
            step = fault.saving_step

            def tagged() -> None:
                local.step = step
                work()

            in_background(tagged)

        def kill(where: str) -> None:
            print(f"FAULT kill -9 {where} of {fault.name} (step {fault.step}) at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        def wrapped_make_durable(partial, target) -> None:
            background = threading.current_thread().name == "litforge-checkpoint-fsync"
            armed["now"] = background and target.name == fault.name and getattr(local, "step", -1) == fault.step
            if armed["now"] and fault.when == "before_rename":
                kill("in the background thread before the rename")
            make_durable(partial, target)

        def wrapped_fsync_directory(folder) -> None:
            if armed.get("now") and fault.when == "after_rename":
                kill("in the background thread after the rename, before the folder's fsync")
            fsync_directory(folder)

        io._in_background, io._make_durable = wrapped_in_background, wrapped_make_durable
        io.fsync_directory = wrapped_fsync_directory
