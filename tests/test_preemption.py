"""The pre-emption signal (SIGUSR1) under SLURM and DDP: saved at an agreed step, requeued once, no hang (issue 30).

Lightning's SLURM requeue (`SLURMEnvironment(auto_requeue=True)`) saves a checkpoint inside its SIGUSR1 handler; under
DDP that save's collectives met another rank inside a collective of its own and hung 5 of 15 deliveries. litforge's
on-signal callback only notes the signal in the handler; the ranks agree on it at their next common point, save
`last.ckpt` and global rank 0 runs `scontrol requeue` once.

The fake here, and why it stays: these tests need the signal at a moment a real cluster cannot hit on demand (at
step 3, at step 5 on rank 1 alone, at 20 seeded random moments, some inside validation), so they send it themselves
to a process that takes itself for a SLURM job (`SLURM_JOB_ID`), and a fake `scontrol` first on PATH records what
would be requeued. The same path with the real thing, nothing faked (slurmctld's signal at the time limit, the
real `scontrol requeue`, the job back in its folder): tests/test_slurm_requeue.py.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import CONF
from gloo import GlooRanks, quiet_trainer, tiny_module

pytestmark = pytest.mark.filterwarnings(  # Lightning's hint on a machine with SLURM installed, outside a job
    "ignore:The `srun` command is available on your system but is not used"
)
GLOO_PRELOAD = ("pytorch_lightning", "litforge.jobs.train")  # what the ranks import before the first delivery
DELIVERIES = 20
EXIT_WITHIN_S = 20  # every rank's fit has ended this long after the signal at the latest


def _fake_scontrol(folder: Path) -> Path:
    """A `scontrol` that appends its arguments to `<folder>/scontrol.log`; returns the log's path."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{folder / "scontrol.log"}"\n')
    script.chmod(0o755)
    return folder / "scontrol.log"


def _handler_codes(handler: object) -> set:
    """The code objects a signal handler runs first (a function, a bound method or a callable object)."""
    codes = set()
    call = vars(type(handler)).get("__call__")  # an object's handler (Lightning's _HandlersCompose)
    for candidate in (handler, getattr(handler, "__func__", None), call):
        code = getattr(candidate, "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


class _InHandlerSpy:
    """Wraps `trainer.save_checkpoint`, recording each call made while a `signum` handler is on the stack."""

    def __init__(self, trainer, signum: int) -> None:
        self.signum, self.codes, self.inside, self.calls = signum, set(), [], 0
        real = trainer.save_checkpoint

        def save_checkpoint(*args, **kwargs):
            self.calls += 1
            frame = sys._getframe()
            while frame is not None:
                if frame.f_code in self.codes:
                    self.inside.append(frame.f_code.co_qualname)
                frame = frame.f_back
            return real(*args, **kwargs)

        trainer.save_checkpoint = save_checkpoint

    def signal_self(self) -> None:
        self.codes |= _handler_codes(signal.getsignal(self.signum))  # whatever fit installed for the signal
        os.kill(os.getpid(), self.signum)


@pytest.mark.slow
def test_slurm_preemption_saves_outside_the_signal_handler_and_requeues_once(compose_cfg, tmp_path, monkeypatch):
    """`trainer=slurm` with the default callbacks, one process inside a (fake) SLURM job: SIGUSR1 at step 3 ends the
    fit at the next batch with `last.ckpt` and one `scontrol requeue <job id>`, and no checkpoint is written while
    the signal handler runs. Before issue 30 Lightning's handler (auto_requeue=True) wrote `hpc_ckpt_1.ckpt` from
    inside the handler, which is what hung under DDP."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate

    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    log = _fake_scontrol(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for key, value in dict(
        SLURM_JOB_ID="4242", SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
        SLURM_JOB_NAME="train", SLURM_NODELIST="localhost",
    ).items():  # fmt: skip
        monkeypatch.setenv(key, value)
    cfg = compose_cfg("trainer=slurm")
    on_signal = instantiate(cfg.callbacks.checkpoint_on_signal, hang_grace=None)
    spy_box: list[_InHandlerSpy] = []

    class SignalAtStep3(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                spy_box[0].signal_self()

    trainer = quiet_trainer(
        tmp_path / "run",
        plugins=[instantiate(plugin) for plugin in cfg.trainer.plugins],
        callbacks=[on_signal, SignalAtStep3()],
    )
    spy_box.append(_InHandlerSpy(trainer, signal.SIGUSR1))
    exit_code, message = 0, "the fit went on to its end"
    try:
        fit_or_stop(trainer, tiny_module(), None, None, tmp_path / "run")
    except TrainingStopped as stopped:
        exit_code, message = stopped.exit_code, str(stopped)
    assert spy_box[0].inside == [], f"checkpoint written inside the signal handler ({spy_box[0].inside})"
    assert exit_code == 143, message
    assert "stopped by SIGUSR1 at step 3" in message and "requeued SLURM job 4242" in message, message
    assert log.read_text() == "requeue 4242\n"
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None), "fit left its SIGUSR1 handler installed"


def test_outside_slurm_the_preemption_signal_ends_with_the_resume_hint(tmp_path, monkeypatch):
    """No SLURM job id: nothing is requeued; the run ends as after SIGTERM, exit 143 with the resume command."""
    import pytorch_lightning as pl

    from litforge.callbacks.fault_tolerance import CheckpointOnSignal
    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    log = _fake_scontrol(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    class SignalAtStep2(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 2:
                os.kill(os.getpid(), signal.SIGUSR1)

    trainer = quiet_trainer(tmp_path, callbacks=[CheckpointOnSignal(hang_grace=None), SignalAtStep2()])
    with pytest.raises(TrainingStopped) as stopped:
        fit_or_stop(trainer, tiny_module(), None, None, tmp_path)
    assert stopped.value.exit_code == 143
    assert str(stopped.value).endswith(f"Continue with: python train.py resume={tmp_path}"), str(stopped.value)
    assert "stopped by SIGUSR1 at step 2" in str(stopped.value)
    assert not log.exists(), "scontrol ran outside a SLURM job"


def test_inside_slurm_the_preemption_signal_is_noted_while_starting_and_ignored_once_trained():
    """A fresh interpreter taking itself for a SLURM job: SIGUSR1 before training (its default action would end the
    process) is noted for the on-signal callback; after training it is ignored, also through the interpreter's exit
    (a Python handler is reset to the default action there)."""
    import subprocess

    code = (
        "import os, signal\n"
        "from litforge.runtime.requeue import catch_early, ignore_from_now, take_early_signal\n"
        "catch_early('SIGUSR1'); os.kill(os.getpid(), signal.SIGUSR1)\n"
        "assert take_early_signal() and not take_early_signal()\n"
        "ignore_from_now('SIGUSR1'); os.kill(os.getpid(), signal.SIGUSR1)\n"
        "assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN\n"
        "print('alive')\n"
    )
    env = {**os.environ, "SLURM_JOB_ID": "31"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "alive"), done.stderr
    env.pop("SLURM_JOB_ID")
    outside = code.replace("assert take_early_signal() and not take_early_signal()\n", "")
    done = subprocess.run([sys.executable, "-c", outside], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == -signal.SIGUSR1, "outside SLURM nothing is changed: the default action"


def test_slurm_job_id_names_the_array_task():
    from litforge.runtime.requeue import slurm_job_id

    assert slurm_job_id({}) is None
    assert slurm_job_id({"SLURM_JOB_ID": "77"}) == "77"
    assert slurm_job_id({"SLURM_JOB_ID": "78", "SLURM_ARRAY_JOB_ID": "70", "SLURM_ARRAY_TASK_ID": "3"}) == "70_3"
    assert slurm_job_id({"SLURM_JOB_ID": "77; rm -rf /"}) is None  # never handed to scontrol


def test_the_submitit_launcher_sends_the_signal_the_callback_listens_to(compose_cfg):
    """submitit's own time-limit signal is USR2 (`signal_delay_s` → `#SBATCH --signal=USR2@<s>`), which no litforge
    or Lightning handler listens to: hydra/launcher=slurm overrides it with USR1, the callback's requeue_signal, and
    the sbatch script submitit writes from that config says so."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import _make_sbatch_string

    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert SlurmQueueConf.signal_delay_s == 120 and SlurmQueueConf().additional_parameters == {}, (
        "hydra-submitit-launcher changed its signal defaults: check conf/hydra/launcher/slurm.yaml"
    )
    extra = OmegaConf.to_container(launcher.additional_parameters, resolve=True)
    assert extra == {"signal": f"USR1@{launcher.signal_delay_s}"}
    script = _make_sbatch_string(
        command="python -m submitit.core._submit x",
        folder="/tmp/litforge-sbatch",
        signal_delay_s=launcher.signal_delay_s,
        additional_parameters=extra,
    )
    signals = [line for line in script.splitlines() if line.startswith("#SBATCH --signal=")]
    assert signals == [f"#SBATCH --signal=USR1@{launcher.signal_delay_s}"], script
    callbacks = compose_cfg().callbacks
    assert callbacks.checkpoint_on_signal.requeue_signal == "SIG" + signals[0].split("=")[1].split("@")[0]
    slurm_trainer = compose_cfg("trainer=slurm").trainer
    assert [plugin.auto_requeue for plugin in slurm_trainer.plugins if "SLURMEnvironment" in plugin._target_] == [
        False
    ], "Lightning's own SIGUSR1 requeue (a save inside the signal handler) must stay off"


def _delivery(seed: int, every_rank: bool = False) -> tuple[tuple[int, ...], float]:
    """Delivery `seed`'s draws: the ranks the SIGUSR1 goes to (all if `every_rank`) and its delay in s after training
    starts. benchmarks/preemption.py's control arm draws through this too, so both arms see the same deliveries."""
    rng = random.Random(seed)
    targets = rng.choice([(0,), (1,), (0, 1)])
    return ((0, 1) if every_rank else targets), rng.uniform(0.0, 1.5)


def _ddp_trainer(root: str, world_size: int, **overrides):
    """The quiet gloo DDP trainer a delivery fits with (here and in benchmarks/preemption.py): epochs without end until
    `max_time`, with a validation of 8 batches every 8 steps for the signal to land in."""
    return quiet_trainer(root, world_size, max_epochs=1000, val_check_interval=8, limit_val_batches=8, **overrides)


def _deliver_on_ranks(rank: int, world_size: int, root: str, seed: int, every_rank: bool = False) -> dict:
    """One DDP fit that a SIGUSR1 interrupts at a random moment (seeded: which ranks get it, unless `every_rank`, as
    SLURM signals every task; how long after training starts). Returns the step it stopped at, when the signal was
    sent and when the fit had ended, and how it ended (benchmarks/preemption.py runs it too)."""
    import pytorch_lightning as pl

    from litforge.callbacks.fault_tolerance import CheckpointOnSignal
    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    targets, delay = _delivery(seed, every_rank)
    bin_dir = Path(root) / "bin"
    if rank == 0:
        _fake_scontrol(bin_dir)
    saved_env = {key: os.environ.get(key) for key in ("PATH", "SLURM_JOB_ID")}
    os.environ.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID=str(5000 + seed))
    sent: list[float] = []
    where: list[str] = []
    spy_box: list[_InHandlerSpy] = []

    class SignalLater(pl.Callback):
        """Sends the signal from a timer thread: it lands wherever the main thread is (a step, DDP's all-reduce,
        validation, an agreement). Never after the fit: a timer starved past the fit's end (the other rank's signal
        had stopped both) would meet the handler found before fit, SIGUSR1's default, and kill this rank."""

        def __init__(self) -> None:
            self.lock, self.fitting = threading.Lock(), False

        def on_train_start(self, trainer, pl_module):
            self.fitting = True
            if rank in targets:

                def fire() -> None:
                    with self.lock:  # the fit's handler stays installed until `ended` below has run
                        if self.fitting:
                            where.append("validation" if trainer.validating else "training")
                            sent.append(time.time())
                            spy_box[0].signal_self()

                threading.Timer(delay, fire).start()

        def ended(self, *_args) -> None:  # before Lightning restores the handlers (its _teardown)
            with self.lock:
                self.fitting = False

        on_exception = on_train_end = ended

    on_signal = CheckpointOnSignal(hang_grace=None, check_every_n_steps=4)
    trainer = _ddp_trainer(
        root,
        world_size,
        max_time={"seconds": 30},  # a run the signal never stopped ends here, and the test fails on its step
        callbacks=[on_signal, SignalLater()],  # the timer starts after the callback installed its handler
    )
    spy_box.append(_InHandlerSpy(trainer, signal.SIGUSR1))
    exit_code, message = 0, ""
    try:
        fit_or_stop(trainer, tiny_module(rows=512, width=64), None, None, Path(root))
    except TrainingStopped as stopped:
        exit_code, message = stopped.exit_code, str(stopped)
    finally:
        ended = time.time()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {
        "step": trainer.global_step,
        "sent": sent[0] if sent else None,
        "where": where[0] if where else None,
        "ended": ended,
        "exit_code": exit_code,
        "message": message,
        "saved": on_signal.saved_path,
        "inside_handler": spy_box[0].inside,
        "handler_left": signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None),
    }


@pytest.mark.slow
@pytest.mark.distributed
def test_twenty_preemption_signals_at_random_moments_to_two_ddp_ranks_all_save_and_requeue(ranks: GlooRanks, tmp_path):
    """20 SIGUSR1 deliveries (seeded: to rank 0, rank 1 or both, 0-1.5 s into training, so they land in steps, in
    DDP's gradient all-reduce, in validation and in the agreements): every one stops both ranks at the same step,
    saves a loadable `last.ckpt` at that step, requeues the (fake) SLURM job exactly once, and both ranks' fits end
    within EXIT_WITHIN_S of the signal. A hang fails the delivery after the ranks' 60 s timeout."""
    slowest, landed = 0.0, []
    for seed in range(DELIVERIES):
        root = tmp_path / f"delivery{seed}"
        results = ranks.run(_deliver_on_ranks, str(root), seed, timeout=60)
        sent = min(r["sent"] for r in results if r["sent"] is not None)
        landed += [r["where"] for r in results if r["where"]]
        steps = {r["step"] for r in results}
        assert len(steps) == 1, f"delivery {seed}: the ranks stopped at different steps {steps}"
        step = steps.pop()
        for rank, seen in enumerate(results):
            assert seen["exit_code"] == 143 and f"stopped by SIGUSR1 at step {step}" in seen["message"], (
                f"delivery {seed}, rank {rank}: {seen}"
            )
            assert seen["inside_handler"] == [], f"delivery {seed}, rank {rank}: saved inside the handler"
            assert not seen["handler_left"], f"delivery {seed}, rank {rank}: fit left its handler installed"
        assert f"requeued SLURM job {5000 + seed}" in results[0]["message"], results[0]["message"]
        assert (root / "bin" / "scontrol.log").read_text() == f"requeue {5000 + seed}\n", f"delivery {seed}"
        if step > 0:
            checkpoint = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True)
            assert checkpoint["global_step"] == step and checkpoint["state_dict"], f"delivery {seed}"
        slowest = max(slowest, max(r["ended"] for r in results) - sent)
    assert slowest < EXIT_WITHIN_S, f"the slowest delivery took {slowest:.1f} s to end both fits"
    print(f"{DELIVERIES} deliveries ({landed.count('validation')} signals in validation), slowest {slowest:.2f} s")


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_ddp_job_preempted_on_one_rank_saves_requeues_and_exits(tmp_path):
    """The real CLI, `strategy=ddp trainer.devices=2` inside a (fake) SLURM job: SIGUSR1 to rank 1 alone after step
    5 (ranks agree every 2 batches) stops both ranks at step 6; the job saves last.ckpt there, requeues itself once
    and exits 143 within EXIT_WITHIN_S of the signal."""
    from conftest import ROOT, TINY, run_cli, single_run

    log = _fake_scontrol(tmp_path / "bin")
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "6060",
    }
    result = run_cli(
        "train.py",
        *TINY,
        "trainer.max_epochs=3",
        "trainer.limit_train_batches=6",
        "strategy=ddp",
        "trainer.devices=2",
        "callbacks.checkpoint_on_signal.check_every_n_steps=2",
        "+callbacks.fault._target_=faults.SignalAt",
        "+callbacks.fault.step=5",
        "+callbacks.fault.signal=SIGUSR1",
        "+callbacks.fault.rank=1",
        log_dir=tmp_path / "logs",
        env=env,
    )
    ended = time.time()
    assert result.returncode == 143, result.output[-3000:]
    import re

    signalled = float(re.search(r"FAULT SIGUSR1 rank 1 at ([0-9.]+)", result.output).group(1))
    assert ended - signalled < EXIT_WITHIN_S, f"exited {ended - signalled:.1f} s after the signal"
    print(f"the job exited {ended - signalled:.2f} s after the signal")
    assert "stopped by SIGUSR1 at step 6 (epoch 1)" in result.output, result.output[-3000:]
    assert "requeued SLURM job 6060" in result.output and "Traceback" not in result.output
    said = "litforge: stopped by SIGUSR1 at step 6 (epoch 1); saved "  # written before the requeue, flushed
    assert said in result.output and "; requeueing SLURM job 6060 (scontrol requeue)" in result.output
    # requeued once, from global rank 0 (time_limit=auto may also ask `scontrol show job` for the job's end time)
    assert [line for line in log.read_text().splitlines() if "requeue" in line] == ["requeue 6060"]
    saved = torch.load(single_run(tmp_path / "logs") / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 6
