"""What survives what: real processes, really killed, resumed to the same result (README "What survives what")."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY, read_metrics, run_cli, single_run

pytestmark = pytest.mark.slow

# 3 epochs of 6 batches: epoch ends at steps 6, 12, 18; step 9 is the middle of epoch 1
COMMON = [*TINY, "trainer.max_epochs=3", "trainer.limit_train_batches=6", "callbacks.early_stopping=null"]
FAULTS_ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}


def fault(name: str, **kwargs) -> list[str]:
    """Overrides adding a tests/faults.py callback to a CLI run."""
    return [f"+callbacks.fault._target_=faults.{name}", *(f"+callbacks.fault.{k}={v}" for k, v in kwargs.items())]


def last_ckpt(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)


def assert_same_weights(expected: dict, got: dict) -> None:
    assert expected["state_dict"].keys() == got["state_dict"].keys()
    for name, tensor in expected["state_dict"].items():
        assert torch.equal(tensor, got["state_dict"][name]), name
    assert (expected["epoch"], expected["global_step"]) == (got["epoch"], got["global_step"])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    log_dir = tmp_path_factory.mktemp("uninterrupted")
    result = run_cli("train.py", *COMMON, log_dir=log_dir)
    assert result.returncode == 0, result.output[-3000:]
    return single_run(log_dir)


def listening_sockets(pid: int) -> list[str]:
    """TCP sockets in LISTEN state owned by process `pid` (from /proc: no extra tools)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                found.append(fields[1])
    return found


def test_kill_9_then_resume_auto_ends_like_an_uninterrupted_run(uninterrupted, tmp_path):
    """SIGKILL from outside once a checkpoint exists; `resume=auto` alone continues the run in its own folder."""
    cmd = [sys.executable, str(ROOT / "train.py"), f"paths.log_dir={tmp_path}", *COMMON]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sockets = None
    deadline = time.monotonic() + 180
    while not list(tmp_path.glob("train/runs/*/checkpoints/last.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before writing a checkpoint"
        if sockets is None and list(tmp_path.glob("train/runs/*/tensorboard")):
            sockets = listening_sockets(proc.pid)  # training has started: nothing may listen on a port
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert sockets == [], f"a training run listens on {sockets}"
    run_dir = single_run(tmp_path)
    assert not (run_dir / "metrics.json").exists()
    killed_at = last_ckpt(run_dir)["global_step"]
    assert killed_at < 18, "killed after training had finished: nothing was tested"

    resumed = run_cli("train.py", "resume=auto", log_dir=tmp_path)  # the run's own overrides come back
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert single_run(tmp_path) == run_dir, "resumed into the same run folder"
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("test/acc", "test/loss", "val/acc", "val/loss"):
        assert got[name] == pytest.approx(expected[name], abs=1e-6), name


def test_sigterm_mid_epoch_saves_the_step_and_resumes_exactly(uninterrupted, tmp_path):
    result = run_cli("train.py", *COMMON, *fault("SignalAt", step=9), log_dir=tmp_path, env=FAULTS_ENV)
    assert result.returncode == 143, result.output[-3000:]  # 128 + SIGTERM
    assert "Traceback" not in result.output
    assert "stopped by SIGTERM at step 9 (epoch 1)" in result.output and "resume=" in result.output
    assert "after SIGTERM" not in result.output and "most recent call first" not in result.output, "the watchdog fired"
    run_dir = single_run(tmp_path)
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (1, 9), "saved at the step, not the epoch start"
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["batches_done"] == 3

    resumed = run_cli("train.py", f"resume={run_dir}", log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    assert read_metrics(run_dir)["metrics"]["test/acc"] == read_metrics(uninterrupted)["metrics"]["test/acc"]


def test_sigterm_mid_validation_exits_within_the_grace_and_the_resume_validates_again(uninterrupted, tmp_path):
    """A validation of 9 batches of 4 s each (36 s, longer than a scheduler's 30 s grace) at step 12 gets SIGTERM
    after its first batch: the run stops after that batch, saves and exits 143 well within 30 s. resume=auto runs
    that validation again in full (Lightning alone would skip it): weights, metrics and the best-checkpoint choice
    are those of the uninterrupted run (the same samples, in batches of 16 instead of 256)."""
    slow_val = [
        *COMMON,
        "+data.eval_batch_size=16",
        "trainer.limit_val_batches=null",
        "trainer.limit_test_batches=null",
    ]
    killed = run_cli(
        "train.py", *slow_val, *fault("SignalInValidation", step=12, batch=0, sleep=4), log_dir=tmp_path, env=FAULTS_ENV
    )
    ended = time.time()
    assert killed.returncode == 143, killed.output[-3000:]
    signalled = float(re.search(r"FAULT SIGTERM in validation batch 0 at ([0-9.]+)", killed.output).group(1))
    assert ended - signalled < 30, f"exited {ended - signalled:.1f} s after SIGTERM"
    assert "stopped by SIGTERM at step 12 (epoch 1)" in killed.output and "Traceback" not in killed.output
    run_dir = single_run(tmp_path)
    assert last_ckpt(run_dir)["global_step"] == 12

    resumed = run_cli("train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    expected, got = last_ckpt(uninterrupted), last_ckpt(run_dir)
    assert_same_weights(expected, got)
    for name in ("test/acc", "test/loss", "val/acc", "val/loss"):
        assert read_metrics(run_dir)["metrics"][name] == pytest.approx(
            read_metrics(uninterrupted)["metrics"][name], abs=1e-6
        ), name
    # the monitored ModelCheckpoint's state (the unmonitored one beside it keeps last.ckpt)
    (expected_cb,), (got_cb,) = (
        [v for v in ckpt["callbacks"].values() if v.get("monitor")] for ckpt in (expected, got)
    )
    assert Path(got_cb["best_model_path"]).name == Path(expected_cb["best_model_path"]).name, (
        "the interrupted validation (step 12) took part in picking the best checkpoint"
    )
    # last.ckpt's record of the best file is current: it names the best file on disk (once, it named the previous
    # epoch's, deleted since: last.ckpt was written before Lightning's epoch-end top-k save)
    for folder, record in ((uninterrupted, expected_cb), (run_dir, got_cb)):
        best_files = [p.name for p in (folder / "checkpoints").glob("epoch*.ckpt")]
        assert best_files == [Path(record["best_model_path"]).name], (folder, best_files)
    assert float(got_cb["best_model_score"]) == pytest.approx(float(expected_cb["best_model_score"]), abs=1e-6)


def test_sigterm_ends_a_hung_run_within_the_grace_with_its_stacks_and_keeps_its_checkpoints(tmp_path):
    """A run blocked forever at step 8 (a lock, as a rank in an unmatched collective) gets SIGTERM: the loop never
    reaches its next step, so the watchdog ends it hang_grace (2 s) later, exit 143, naming the blocked frame; the
    epoch-end last.ckpt (step 6) is kept."""
    result = run_cli(
        "train.py",
        *COMMON,
        "callbacks.checkpoint_on_signal.hang_grace=2",
        *fault("HangAt", step=8),
        log_dir=tmp_path,
        env=FAULTS_ENV,
        timeout=120,
    )
    ended = time.time()
    assert result.returncode == 143, result.output[-3000:]
    hung_at = float(re.search(r"FAULT hang at ([0-9.]+)", result.output).group(1))
    assert 2 <= ended - hung_at < 2 + 10, "ended within the grace period plus a few seconds"
    assert "still running 2 s after SIGTERM" in result.stderr
    dump = 'faults.py", line {} in hang_forever'
    assert re.search(dump.format(r"\d+"), result.stderr), result.stderr[-3000:]
    run_dir = single_run(tmp_path)
    log = (run_dir / "train.log").read_text()
    assert "still running 2 s after SIGTERM" in log and re.search(dump.format(r"\d+"), log), "the run log has it"
    assert last_ckpt(run_dir)["global_step"] == 6


def test_last_ckpt_is_the_latest_step_when_the_metric_stops_improving(uninterrupted, tmp_path):
    """Lightning writes last.ckpt only beside a new best checkpoint; litforge's is always the latest step.

    objective.mode=min on val/acc (which rises every epoch here) keeps epoch 0 the best: before the fix, last.ckpt
    stayed at step 6 and resume=auto retrained epoch 1. SIGKILL at step 15 (mid-epoch 2).
    """
    killed = run_cli(
        "train.py",
        *COMMON,
        "objective.mode=min",
        *fault("SignalAt", step=15, signal="SIGKILL"),
        log_dir=tmp_path,
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path)
    assert [p.name for p in (run_dir / "checkpoints").glob("epoch*.ckpt")] == ["epoch000-step000006.ckpt"]
    assert last_ckpt(run_dir)["global_step"] == 12, "last.ckpt must be the latest epoch end, not the best epoch"

    resumed = run_cli("train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "resuming" in resumed.output and "from last.ckpt" in resumed.output
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))  # last.ckpt is step 18, the final state
    result = read_metrics(run_dir)
    assert Path(result["best_checkpoint"]).name == "epoch000-step000006.ckpt", "best selection is unchanged"
    assert Path(result["last_checkpoint"]).name == "last.ckpt"


def test_checkpoint_every_saves_mid_epoch_and_a_kill_9_resumes_exactly(uninterrupted, tmp_path):
    """checkpoint_every=4: last.ckpt at step 8 (epoch 1, batch 2 of 6); SIGKILL at step 10; resume=auto is exact."""
    killed = run_cli(
        "train.py",
        *COMMON,
        "checkpoint_every=4",
        *fault("SignalAt", step=10, signal="SIGKILL"),
        log_dir=tmp_path,
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path)
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (1, 8), "saved mid-epoch by the clock"
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["batches_done"] == 2

    resumed = run_cli("train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("test/acc", "test/loss", "val/acc", "val/loss"):
        assert got[name] == pytest.approx(expected[name], abs=1e-6), name


@pytest.mark.parametrize(("when", "survives"), [("before_rename", 6), ("after_rename", 8)])
def test_a_kill_9_inside_the_background_rename_leaves_a_whole_last_ckpt_and_resumes_exactly(
    uninterrupted, tmp_path, when: str, survives: int
):
    """The window SignalAt waits out: SIGKILL of the real CLI run from inside litforge's background checkpoint thread
    (on by default) while it fsyncs and renames the step-8 last.ckpt (checkpoint_every=4; the previous last.ckpt is
    epoch 0's, step 6). Real: the process, the SIGKILL, the files on disk and the resumed CLI run; faked: only the
    moment (faults.KillInBackgroundRename wraps the thread's rename step to fire there).

    What survives: before the rename, the previous last.ckpt (step 6), whole, with the new one whole beside it as
    `.last.ckpt.partial` (not used, replaced by the next save); after the rename, the new last.ckpt (step 8), whole.
    Never a torn file; resume=auto ends bit-equal to an uninterrupted run either way."""
    killed = run_cli(
        "train.py",
        *COMMON,
        "checkpoint_every=4",
        *fault("KillInBackgroundRename", step=8, when=when),
        log_dir=tmp_path,
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    assert "FAULT kill -9 in the background thread" in killed.output, killed.output[-3000:]
    run_dir = single_run(tmp_path)
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        torch.load(path, weights_only=True)  # every checkpoint file is whole
    assert last_ckpt(run_dir)["global_step"] == survives
    partial = run_dir / "checkpoints" / ".last.ckpt.partial"
    if when == "before_rename":
        assert torch.load(partial, weights_only=True)["global_step"] == 8, "the new file was written whole"
    else:
        assert not partial.exists()

    resumed = run_cli("train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"Resuming from {run_dir / 'checkpoints' / 'last.ckpt'}" in resumed.output, resumed.output[-3000:]
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    assert not partial.exists(), "the next save replaced the leftover partial file"
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("test/acc", "test/loss", "val/acc", "val/loss"):
        assert got[name] == pytest.approx(expected[name], abs=1e-6), name


def test_time_limit_under_slurm_saves_and_exits_with_the_resume_command(tmp_path):
    """SLURM's job end time (a fake one: now) is earlier than time_limit=2h: the run stops after its first step."""
    from litforge.checkpointing.resume import resolve

    env = {**FAULTS_ENV, "SLURM_JOB_END_TIME": str(int(time.time()))}
    result = run_cli("train.py", *COMMON, "time_limit=2h", log_dir=tmp_path, env=env)
    assert result.returncode == 75, result.output[-3000:]
    assert "Traceback" not in result.output
    run_dir = single_run(tmp_path)
    assert "time_limit: stopped at step 1 (epoch 0)" in result.output
    assert f"Continue with: python train.py resume={run_dir}" in result.output.replace("\n", "")
    assert last_ckpt(run_dir)["global_step"] == 1 and not (run_dir / "metrics.json").exists()
    assert resolve("auto", tmp_path, "train") == (run_dir.resolve(), (run_dir / "checkpoints/last.ckpt").resolve())


def test_resume_auto_without_an_interrupted_run_starts_a_new_one(tmp_path):
    from litforge.checkpointing.resume import resolve

    assert resolve("auto", tmp_path, "train") is None
    finished = tmp_path / "train" / "runs" / "finished"
    (finished / "checkpoints").mkdir(parents=True)
    (finished / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (finished / "metrics.json").write_text("{}")
    assert resolve("auto", tmp_path, "train") is None, "a finished run is not resumed"
    (finished / "metrics.json").unlink()
    assert resolve("auto", tmp_path, "train") == (finished.resolve(), (finished / "checkpoints/last.ckpt").resolve())


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    result = run_cli(
        "train.py",
        *COMMON,
        "trainer.max_epochs=5",
        "trainer.limit_train_batches=4",
        *fault("PoisonAt", step=10),
        log_dir=tmp_path,
        env=FAULTS_ENV,
    )
    assert result.returncode == 1, result.output[-3000:]
    assert "Traceback" not in result.output
    assert "the loss became nan at step 10 (epoch 2, batch 2)" in result.output, result.output[-2000:]
    run_dir = single_run(tmp_path)
    assert f"last good checkpoint is {run_dir / 'checkpoints' / 'last.ckpt'}" in result.output
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True)
        assert checkpoint["global_step"] <= 8, f"{path.name} was written after the NaN step"
        assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values()), path.name
    assert last_ckpt(run_dir)["global_step"] == 8


def test_nan_check_every_n_steps_still_reports_the_exact_step():
    from unittest.mock import MagicMock

    from litforge.callbacks.fault_tolerance import StopOnNonFiniteLoss
    from litforge.core.errors import TrainingStopped

    guard, trainer = StopOnNonFiniteLoss(check_every_n_steps=50), MagicMock(current_epoch=0)
    trainer.checkpoint_callback = None
    trainer.log_every_n_steps = 1000  # not a logging step either: nothing is read
    trainer.should_stop = False
    for step, loss in enumerate([1.0, 0.5, float("inf"), float("nan")]):
        trainer.global_step = step
        guard.on_train_batch_start(trainer, None, None, step)
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, step)  # no check yet: no sync
    with pytest.raises(TrainingStopped, match=r"became inf at step 2 \(epoch 0, batch 2\)"):
        guard.on_save_checkpoint(trainer, None, {})  # a checkpoint is about to be written: check now


def test_a_checkpoint_write_killed_halfway_leaves_the_previous_file_whole(tmp_path):
    """Kill the writer while a ~400 MB checkpoint is being written over last.ckpt: the old last.ckpt still loads."""
    target = tmp_path / "last.ckpt"
    script = f"""
import torch
from litforge.checkpointing.io import AtomicCheckpointIO
io = AtomicCheckpointIO()
io.save_checkpoint({{"state_dict": {{"w": torch.ones(3)}}, "step": 1}}, {str(target)!r})
print("first saved", flush=True)
io.save_checkpoint({{"state_dict": {{"w": torch.zeros(100_000_000)}}, "step": 2}}, {str(target)!r})
print("second saved", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "first saved"
    partial = tmp_path / ".last.ckpt.partial"
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 1_000_000):
        assert proc.poll() is None and time.monotonic() < deadline, "the big save finished before it could be killed"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    checkpoint = torch.load(target, weights_only=True)
    assert checkpoint["step"] == 1 and torch.equal(checkpoint["state_dict"]["w"], torch.ones(3))
    # the next save replaces the leftover partial file and completes
    from litforge.checkpointing.io import AtomicCheckpointIO

    AtomicCheckpointIO().save_checkpoint({"step": 3}, target)
    assert torch.load(target, weights_only=True)["step"] == 3 and not partial.exists()


def test_training_writes_checkpoints_through_the_atomic_plugin(compose_cfg):
    from litforge.checkpointing.io import AtomicCheckpointIO
    from litforge.core.instantiate import instantiate_group
    from litforge.runtime.devices import build_trainer

    cfg = compose_cfg()
    trainer = build_trainer(instantiate_group("trainer", cfg.trainer), logger=False)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


@pytest.mark.distributed
@pytest.mark.parametrize("rank", [1, 0])
def test_a_rank_that_dies_makes_the_others_exit_within_a_minute(rank: int, tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        f"paths.log_dir={tmp_path}",
        *COMMON,
        "trainer.max_epochs=50",
        "strategy.name=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        *fault("SignalAt", step=3, signal="SIGKILL", rank=rank),
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **FAULTS_ENV},
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    assert proc.returncode != 0, output[-3000:]
    died_at = float(next(line for line in output.splitlines() if line.startswith("FAULT")).split()[-1])
    # every process of the job (rank 0 and the rank it launched) is gone within a minute of the death
    while _group_alive(proc.pid):
        assert time.time() < died_at + 60, "a rank is still running a minute after another one died"
        time.sleep(0.5)
    print(f"rank {rank} died; all ranks gone {time.time() - died_at:.1f} s later")
    assert not list(tmp_path.glob("train/runs/*/metrics.json"))


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # pgrp, state (zombies have exited)
            return True
    return False


def test_a_failed_sweep_job_keeps_the_others_results_and_the_sweep_says_so(tmp_path):
    """Job 1 asks for a fraction of the validation data that is no batch: only its loaders know their length, so it
    fails inside the job (a missing checkpoint would be refused before the sweep starts)."""
    tiny = [o for o in TINY if not o.startswith("trainer.limit_val_batches=")]
    result = run_cli(
        "train.py", *tiny, "trainer.max_epochs=1", "trainer.limit_val_batches=2,0.0001", log_dir=tmp_path,
        extra_args=("-m",),
    )  # fmt: skip
    assert result.returncode == 1, result.output[-3000:]
    # the failed job's own error: one line naming the job and its swept value, no Hydra "Error executing job" traceback
    errors = [line for line in result.output.splitlines() if line.startswith("litforge: error:")]
    assert len(errors) == 1, errors
    assert errors[0].startswith("litforge: error: sweep job 1 (trainer.limit_val_batches=0.0001): "), errors
    assert "Traceback" not in result.output and "Error executing job" not in result.output, result.output[-3000:]
    assert "failed: job 1: ConfigError: trainer.limit_val_batches=0.0001" in result.stdout  # the closing lines
    sweep = next((tmp_path / "train" / "multiruns").iterdir())
    records = {r["job"]: r for r in (json.loads(p.read_text()) for p in sweep.rglob("result.json"))}
    assert records["0"]["status"] == "COMPLETED" and records["0"]["metrics"]["test/acc"] > 0
    assert records["1"]["status"] == "FAILED" and "limit_val_batches=0.0001" in records["1"]["error"]
    summary = (sweep / "summary.csv").read_text().splitlines()
    assert len(summary) == 4 and summary[2].startswith("0,COMPLETED,2,") and summary[3].startswith("1,FAILED,")
    assert "ConfigError: trainer.limit_val_batches=0.0001" in summary[3], summary[3]  # why it failed


def test_unwritable_log_dir_fails_before_training(tmp_path):
    """Refused before the run starts. Not before torch is imported: the config check imports the configured classes
    (the datamodule imports torch) before it reaches paths.log_dir; the torch-free refusals are pinned in a fresh
    interpreter by tests/test_preflight.py."""
    not_a_folder = tmp_path / "logs"
    not_a_folder.write_text("a file where the log folder should be")
    result = run_cli("train.py", log_dir=not_a_folder)
    assert result.returncode == 1 and "Traceback" not in result.output, result.output[-3000:]
    assert f"paths.log_dir={not_a_folder}: {not_a_folder} is a file, not a folder" in result.output


def test_too_little_free_space_fails_before_training(tmp_path):
    result = run_cli("train.py", "paths.min_free_mb=1e12", log_dir=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.output, result.output[-3000:]
    assert "MB free under paths.log_dir" in result.output and "paths.min_free_mb=0" in result.output
    assert not list(tmp_path.glob("train/runs/*")), "no run folder is created"


def test_full_disk_and_read_only_folders_are_refused(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from litforge.checkpointing.folders import check_folder
    from litforge.core.errors import ConfigError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    with pytest.raises(ConfigError, match="only 1 MB free"):
        check_folder(tmp_path, min_free_mb=200)
    check_folder(tmp_path, min_free_mb=0)

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("tempfile.TemporaryFile", read_only)
    with pytest.raises(ConfigError, match=r"cannot write to paths.log_dir=.*Read-only file system"):
        check_folder(tmp_path, min_free_mb=0)


def test_no_shell_in_litforge():
    """Config values never reach a shell: no `shell=`, no os.system/popen/exec/spawn. litforge starts three programs,
    each with an argv list (never a string a shell would parse): `git` (litforge.records.provenance), and SLURM's
    `squeue`/`scontrol` (litforge.runtime.slurm: the job's end time; litforge.runtime.requeue: the requeue)."""
    import ast

    allowed = {
        ROOT / "src" / "litforge" / p for p in ("records/provenance.py", "runtime/slurm.py", "runtime/requeue.py")
    }
    offenders = []
    for path in [*(ROOT / "src" / "litforge").rglob("*.py"), *ROOT.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
                names = (
                    [f"os.{node.attr}"]
                    if node.attr in ("system", "popen") or node.attr.startswith(("exec", "spawn"))
                    else []
                )
            elif isinstance(node, ast.keyword) and node.arg == "shell":
                names = ["shell="]
            elif (
                path in allowed
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
            ):
                argv = node.args[0] if node.args else None
                names = [] if isinstance(argv, (ast.List, ast.Name)) else ["subprocess call whose argv is not a list"]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                for n in names
                if (n.split(".")[0] in ("subprocess", "pty") and path not in allowed)
                or n.startswith(("os.", "subprocess call"))
                or n == "shell="
            ]
    assert offenders == [], offenders


# ---- sharded runs (strategy=fsdp/tp, 2 gloo processes): kill -9 of the whole job, then resume=auto ----------------
# 2 epochs of 4 batches; checkpoint_every=3 saves at step 3 (mid-epoch 0), 4 (epoch end) and 6 (mid-epoch 1, after
# an epoch boundary: where the data order used to drift); the job is SIGKILLed at step 7 and resumes from step 6.
SHARDED = [
    "experiment=gpt_char",
    "data.max_chars=20000",
    "data.block_size=16",
    "data.batch_size=8",
    "model.dim=32",
    "model.depth=2",
    "model.heads=2",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.val_check_interval=1.0",
    "callbacks=[default]",
    "callbacks.progress_bar=null",
    "callbacks.early_stopping=null",
    "callbacks.model_summary=null",
    "print_config=false",
    "logger=csv",
    "trainer=cpu",
    "trainer.devices=2",
    "checkpoint_every=3",
]
# strategy -> (weights atol, metrics atol). fsdp is bit-equal: every parameter is sharded, each rank owns its slice.
# tp: the parameters it does not split (embeddings, norms) are replicated, and each rank computes their gradients
# itself; the two copies differ in the last bits (measured ~6e-8 after 4 steps), and the distributed checkpoint holds
# one copy, so a resumed rank continues from its peer's. Measured final difference 3e-7; metrics were equal.
# pipeline: rank 0 writes one ordinary file (the stages' tensors gathered), each stage loads its part on resume; the
# schedule and the optimizer step are deterministic per stage, so it is bit-equal too.
SHARDED_RESUME = {"fsdp": (0.0, 0.0), "tp": (1e-6, 1e-5), "pipeline": (0.0, 0.0)}


@pytest.fixture(scope="module")
def sharded_uninterrupted(tmp_path_factory) -> dict:
    runs = {}
    for strategy in SHARDED_RESUME:
        log_dir = tmp_path_factory.mktemp(f"sharded_{strategy}")
        result = run_cli("train.py", *SHARDED, f"strategy={strategy}", log_dir=log_dir, timeout=300)
        assert result.returncode == 0, result.output[-3000:]
        runs[strategy] = single_run(log_dir, "gpt_char")
    return runs


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", list(SHARDED_RESUME))
def test_kill_9_of_a_sharded_job_then_resume_auto_ends_like_an_uninterrupted_run(
    strategy, sharded_uninterrupted, tmp_path
):
    from litforge.checkpointing.consolidate import is_distributed_checkpoint
    from litforge.checkpointing.load import load_checkpoint

    weights_atol, metrics_atol = SHARDED_RESUME[strategy]
    killed = run_cli(
        "train.py",
        *SHARDED,
        f"strategy={strategy}",
        *fault("KillJobAt", step=7),
        log_dir=tmp_path,
        env=FAULTS_ENV,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    assert "FAULT kill -9 job at step 7" in killed.output
    run_dir = single_run(tmp_path, "gpt_char")
    last = run_dir / "checkpoints" / "last.ckpt"
    assert is_distributed_checkpoint(last) == (strategy != "pipeline") and not (run_dir / "metrics.json").exists()
    saved = torch.load(last / "meta.pt" if strategy != "pipeline" else last, weights_only=True)
    assert (saved["epoch"], saved["global_step"]) == (1, 6), "the step-6 clock save, mid-epoch 1"

    resumed = run_cli(
        "train.py",
        "experiment=gpt_char",
        "resume=auto",
        "+callbacks.fault.step=-1",
        log_dir=tmp_path,
        env=FAULTS_ENV,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "from last.ckpt" in resumed.output and single_run(tmp_path, "gpt_char") == run_dir

    expected = load_checkpoint(sharded_uninterrupted[strategy] / "checkpoints" / "last.ckpt")  # consolidated
    got = load_checkpoint(last)
    assert (got["epoch"], got["global_step"]) == (expected["epoch"], expected["global_step"]) == (1, 8)
    assert got["state_dict"].keys() == expected["state_dict"].keys()
    for name, tensor in expected["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][name], tensor, atol=weights_atol, rtol=0, msg=name)
    want, have = read_metrics(sharded_uninterrupted[strategy])["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("val/loss", "val/ppl", "test/loss", "test/ppl"):
        assert have[name] == pytest.approx(want[name], abs=metrics_atol, rel=0), name


@pytest.mark.distributed
def test_a_kill_9_during_a_sharded_save_leaves_the_previous_checkpoint_and_resume_auto_continues_from_it(
    sharded_uninterrupted, tmp_path
):
    """strategy=fsdp: the job is SIGKILLed while it overwrites last.ckpt at step 4 (every rank's shards written, meta.pt
    and the rename not): last.ckpt is still the step-3 folder, whole, resume=auto continues from it, and the run ends
    bit-equal to the uninterrupted one."""
    from litforge.checkpointing.load import load_checkpoint

    killed = run_cli(
        "train.py",
        *SHARDED,
        "strategy=fsdp",
        *fault("KillJobDuringSave", step=4),
        log_dir=tmp_path,
        env=FAULTS_ENV,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    assert "FAULT kill -9 job while saving" in killed.output and ".last.ckpt.partial" in killed.output
    run_dir = single_run(tmp_path, "gpt_char")
    checkpoints = run_dir / "checkpoints"
    assert (checkpoints / ".last.ckpt.partial" / ".metadata").is_file(), "the interrupted save had written its shards"
    assert not (checkpoints / ".last.ckpt.partial" / "meta.pt").exists()
    assert torch.load(checkpoints / "last.ckpt" / "meta.pt", weights_only=True)["global_step"] == 3
    assert load_checkpoint(checkpoints / "last.ckpt")["global_step"] == 3  # loadable: the shards merge

    resumed = run_cli(
        "train.py",
        "experiment=gpt_char",
        "resume=auto",
        "+callbacks.fault.step=-1",
        log_dir=tmp_path,
        env=FAULTS_ENV,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert not (checkpoints / ".last.ckpt.partial").exists(), "the next save replaced the leftover"
    expected = load_checkpoint(sharded_uninterrupted["fsdp"] / "checkpoints" / "last.ckpt")
    got = load_checkpoint(checkpoints / "last.ckpt")
    assert got["global_step"] == expected["global_step"] == 8
    for name, tensor in expected["state_dict"].items():
        assert torch.equal(got["state_dict"][name], tensor), name


def test_resume_auto_takes_the_previous_sharded_folder_when_a_kill_fell_between_the_swap_renames(tmp_path):
    """ModelParallel.save_checkpoint swaps folders with two renames (old -> .last.ckpt.previous, new -> last.ckpt);
    a kill between them leaves no last.ckpt: the previous folder is resumed. An incomplete folder (no .metadata) never
    is."""
    from litforge.checkpointing.resume import resolve

    checkpoints = tmp_path / "train" / "runs" / "run" / "checkpoints"
    previous = checkpoints / ".last.ckpt.previous"
    previous.mkdir(parents=True)
    (checkpoints / ".last.ckpt.partial").mkdir()
    assert resolve("auto", tmp_path, "train") is None, "a folder without .metadata is not a checkpoint"
    (previous / ".metadata").write_bytes(b"index")
    assert resolve("auto", tmp_path, "train") == (checkpoints.parent.resolve(), previous.resolve())
    (checkpoints / "last.ckpt").mkdir()
    (checkpoints / "last.ckpt" / ".metadata").write_bytes(b"index")
    assert resolve("auto", tmp_path, "train")[1] == (checkpoints / "last.ckpt").resolve()
    assert resolve(str(checkpoints / "last.ckpt"), tmp_path, "train")[1] == (checkpoints / "last.ckpt").resolve()


# DQN: 3 epochs of 60 gradient steps; the checkpoint at step 80 is mid-epoch, mid-episode, and falls on a target sync
DQN = [
    "experiment=cartpole_dqn",
    "print_config=false",
    "callbacks.progress_bar=null",
    "logger=csv",
    "trainer.max_epochs=3",
    "data.steps_per_epoch=60",
    "data.val_episodes=2",
    "data.test_episodes=2",
    "task.warmup_steps=100",
    "task.target_sync_steps=20",
    "task.eps_decay_steps=150",
    "data.batch_size=32",
    "callbacks.early_stopping=null",
]


def test_dqn_kill_9_mid_episode_resumes_exactly(tmp_path):
    """The replay buffer, the training env mid-episode, exploration's generator and the minibatch draws all resume:
    SIGKILL after step 90 (checkpoint at 80), then resume=auto, ends bit-equal to an uninterrupted run."""
    whole = run_cli("train.py", *DQN, log_dir=tmp_path / "whole", env={"OMP_NUM_THREADS": "1"})
    assert whole.returncode == 0, whole.output[-3000:]
    uninterrupted = single_run(tmp_path / "whole", "cartpole_dqn")

    env = {**FAULTS_ENV, "OMP_NUM_THREADS": "1"}
    killed = run_cli(
        "train.py",
        *DQN,
        "checkpoint_every=80",
        *fault("SignalAt", step=90, signal="SIGKILL"),
        log_dir=tmp_path / "killed",
        env=env,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path / "killed", "cartpole_dqn")
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (1, 80), "saved mid-epoch"
    acting = saved["litforge_dqn_acting"]
    assert acting["env"]["elapsed_steps"] > 0, "the checkpoint should fall mid-episode (pick another step)"

    resumed = run_cli(
        "train.py",
        "resume=auto",
        "task_name=cartpole_dqn",
        "+callbacks.fault.step=-1",
        log_dir=tmp_path / "killed",
        env=env,
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "starts a new episode" not in resumed.output
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    names = [k for k in expected if k.split("/")[0] in ("train", "val", "test")]
    assert "test/return" in names and "train/loss" in names
    assert {k: got.get(k) for k in names} == {k: expected[k] for k in names}


# ---- the streamed image folder with 2 loader workers: kill -9 with the last checkpoint inside the first epoch --------
# 48 grey 8x8 images, 34 for training: 5 batches of 8 per epoch; checkpoint_every=3 saves at step 3 (mid-epoch 0); the
# run is SIGKILLed at step 4. The default MLP's dropout draws from the global RNG, which the checkpoint restores: any
# other draw between the restore and the next step (the evaluation loader's persistent workers drew their base seed
# at the resumed run's first validation; a fresh run draws it in the sanity check, inside Lightning's isolated RNG)
# shifts every later mask, so the resumed run ended with another val/loss.
def streamed_folder(root: Path) -> list[str]:
    from conftest import make_image_folder

    images = make_image_folder(root, per_class=16)
    return [
        *TINY,
        "data=image_folder",
        f"data.root={images}",
        "data.max_in_memory_mb=0",
        "data.num_workers=2",
        "data.batch_size=8",
        "trainer.limit_train_batches=null",
        "trainer.deterministic=true",
        "callbacks.early_stopping=null",
        "logger=csv",
        "checkpoint_every=3",
    ]


def test_streamed_image_folder_with_workers_killed_in_its_first_epoch_resumes_exactly(tmp_path):
    overrides = streamed_folder(tmp_path / "images")
    whole = run_cli("train.py", *overrides, log_dir=tmp_path / "whole")
    assert whole.returncode == 0, whole.output[-3000:]
    uninterrupted = single_run(tmp_path / "whole")
    assert last_ckpt(uninterrupted)["global_step"] == 10, "2 epochs of 5 batches"

    killed = run_cli(
        "train.py",
        *overrides,
        *fault("SignalAt", step=4, signal="SIGKILL"),
        log_dir=tmp_path / "killed",
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path / "killed")
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (0, 3), "the step-3 clock save, inside the first epoch"

    resumed = run_cli(
        "train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path / "killed", env=FAULTS_ENV
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "from last.ckpt" in resumed.output
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("train/loss", "val/acc", "val/loss", "test/acc", "test/loss"):
        assert got[name] == expected[name], name
