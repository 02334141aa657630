"""SLURM as users live it, on a real single-node cluster (tests/slurm_cluster.py; the `slurm_cluster` fixture skips
these tests where it cannot start, and fails them under LITFORGE_REQUIRE_SLURM=1): real sbatch, srun, squeue and
scontrol, the repository's sbatch template (scripts/slurm/train.sbatch) run exactly as docs/distributed.md shows.
The first tests need no cluster: what the launcher asks for, the run folder's name, the folder lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF, ROOT, TINY, run_cli

SBATCH = "scripts/slurm/train.sbatch"
QUIET = ["callbacks.model_summary=null", "logger=csv"]
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")


# ---- without a cluster ----------------------------------------------------------------------------------------------
def test_the_slurm_launcher_asks_for_gpus_only_where_the_run_wants_them(monkeypatch):
    from hydra import compose, initialize_config_dir

    import litforge.runtime.ranks  # noqa: F401  (registers the resolvers)
    from litforge.runtime import slurm

    def launcher(*overrides: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True)
            return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)

    monkeypatch.setattr(slurm, "local_gpus", lambda: 0)
    monkeypatch.setattr(slurm.os, "cpu_count", lambda: 2)
    default = launcher()  # trainer.devices=auto on a machine without GPUs: a CPU job, no gres request
    asked = [default[key] for key in ("gpus_per_node", "tasks_per_node", "cpus_per_task", "nodes")]
    assert asked == [None, 1, 1, 1]
    assert launcher("trainer.devices=1")["gpus_per_node"] is None
    assert launcher("trainer.accelerator=cpu", "trainer.devices=2")["tasks_per_node"] == 2
    assert launcher("data=image_folder", "data.num_workers=7")["cpus_per_task"] == 2, "never more than the node has"
    on_gpus = launcher("trainer.accelerator=gpu", "trainer.devices=4")
    assert (on_gpus["gpus_per_node"], on_gpus["tasks_per_node"]) == (4, 4)
    monkeypatch.setattr(slurm, "local_gpus", lambda: 8)
    on_a_gpu_machine = launcher()
    assert (on_a_gpu_machine["gpus_per_node"], on_a_gpu_machine["tasks_per_node"]) == (8, 8), "auto: all its GPUs"
    assert launcher("trainer.accelerator=cpu")["gpus_per_node"] is None


def test_a_slurm_job_has_one_run_folder_keyed_by_its_job_id(tmp_path):
    from litforge.runtime.slurm import job_end_time, job_run_name

    assert job_run_name(tmp_path, "2026-01-01_00-00-00_abc", env={}) == "2026-01-01_00-00-00_abc"
    assert job_run_name(tmp_path, "x", env={"SLURM_JOB_ID": "42"}) == "slurm-42"
    array = {"SLURM_JOB_ID": "43", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}
    assert job_run_name(tmp_path, "x", env=array) == "slurm-40_3"
    (tmp_path / "slurm-42").mkdir()
    (tmp_path / "slurm-42" / "metrics.json").write_text("{}")  # finished: a second run in one salloc
    assert job_run_name(tmp_path, "x", env={"SLURM_JOB_ID": "42"}) == "slurm-42.1"
    assert job_end_time({"SLURM_JOB_END_TIME": "5000"}) == 5000.0 and job_end_time({}) is None


def test_a_live_run_folder_is_skipped_by_resume_auto_and_refused_by_name(tmp_path, capsys):
    from litforge.checkpointing.folders import LOCK_NAME, hold_run_folder, live_holder, release_run_folder
    from litforge.checkpointing.resume import resolve
    from litforge.core.errors import CheckpointError

    run = tmp_path / "train" / "runs" / "a"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        lock = hold_run_folder(run)
        record = json.loads(lock.read_text())
        assert live_holder(run) is None, "this process's own lock"
        lock.write_text(json.dumps({**record, "pid": sleeper.pid, "job_id": "7"}))
        assert live_holder(run) == f"job 7 on host {record['host']} (pid {sleeper.pid})"
        assert live_holder(run, env={"SLURM_JOB_ID": "7"}) is None, "the same job's requeued attempt"
        assert resolve("auto", tmp_path, "train") is None
        assert f"skipping {run}, still running (job 7" in capsys.readouterr().err
        with pytest.raises(CheckpointError, match=rf"resume={run}: {run} is in use by a running job \(job 7"):
            resolve(str(run), tmp_path, "train")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert resolve("auto", tmp_path, "train") == (run.resolve(), (run / "checkpoints/last.ckpt").resolve()), "stale"
    release_run_folder(run)
    assert (run / LOCK_NAME).exists(), "another process's lock is left alone"


def test_a_requeued_job_resumes_its_own_folder_with_or_without_resume_auto(tmp_path, monkeypatch):
    from litforge.checkpointing.resume import decide
    from litforge.cli.preflight import checked_overrides

    own = tmp_path / "train" / "runs" / "slurm-5"
    (own / "checkpoints").mkdir(parents=True)
    (own / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (own / ".hydra").mkdir()
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    expected = str((own / "checkpoints" / "last.ckpt").resolve())
    assert decide(None, None, tmp_path, "train").checkpoint == expected, "a requeued attempt: not from step 0"
    assert decide("auto", None, tmp_path, "train").checkpoint == expected
    assert decide(None, None, tmp_path, "train", in_multirun=True).checkpoint is None, "a sweep's job: its own folder"
    # a sweep job's folder under hydra/launcher=slurm: resumed only by a requeued attempt (SLURM_RESTART_COUNT > 0)
    assert decide(None, None, tmp_path, "train", in_multirun=True, run_dir=own).checkpoint is None, "first attempt"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert decide(None, None, tmp_path, "train", in_multirun=True, run_dir=own).checkpoint == expected
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    # the folder fixed by hand, as older recipes did (hydra.run.dir=.../slurm-$SLURM_JOB_ID): not "another run's"
    line = [f"paths.log_dir={tmp_path}", f"hydra.run.dir={own}"]
    assert checked_overrides(CONF, "train", line) == line
    (own / "metrics.json").write_text("{}")  # finished: a new run, in slurm-5.1
    assert decide(None, None, tmp_path, "train").checkpoint is None
    monkeypatch.setenv("SLURM_JOB_ID", "6")
    assert decide(None, None, tmp_path, "train").checkpoint is None, "another job starts its own run"


def test_trainer_slurm_keeps_the_atomic_checkpoint_writes(compose_cfg):
    from lightning_fabric.plugins.environments import SLURMEnvironment

    from litforge.checkpointing.io import AtomicCheckpointIO
    from litforge.core.instantiate import instantiate_group

    plugins = instantiate_group("trainer", compose_cfg("trainer=slurm").trainer)["plugins"]
    assert [type(p) for p in plugins] == [AtomicCheckpointIO, SLURMEnvironment]
    assert not plugins[1].auto_requeue  # litforge's pre-emption path requeues (tests/test_preemption.py)


# ---- on the cluster -------------------------------------------------------------------------------------------------
def sbatch(tmp_path: Path, *overrides: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None) -> str:
    """`sbatch [options] scripts/slurm/train.sbatch paths.log_dir=<tmp_path> overrides...` from the repo root."""
    out = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/%j.out", *options, SBATCH, f"paths.log_dir={tmp_path}"]
        + list(overrides),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def job_fields(job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


def wait_for(job: str, timeout: float, *, until: tuple[str, ...] = DONE) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = job_fields(job)
        if fields.get("JobState") in until:
            return fields
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=False)
    raise AssertionError(f"job {job} still {job_fields(job).get('JobState')} after {timeout:.0f} s")


def job_output(tmp_path: Path, job: str) -> str:
    return (tmp_path / f"{job}.out").read_text(errors="replace")


@pytest.mark.slurm
@pytest.mark.slow
def test_a_sweep_through_the_slurm_launcher_with_the_default_devices(tmp_path, slurm_cluster):
    result = run_cli(
        "train.py",
        "hydra/launcher=slurm",
        "optimizer.lr=0.01,0.001",
        *TINY,
        *QUIET,
        "trainer.max_epochs=1",
        "hydra.launcher.timeout_min=5",
        log_dir=tmp_path,
        timeout=240,
        extra_args=("-m",),
    )
    assert result.returncode == 0, result.output[-3000:]
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()
    for job in ("0", "1"):
        assert "test/acc" in json.loads((sweep / job / "metrics.json").read_text())["metrics"], job
    submission = next(sweep.glob(".submitit/*/*_submission.sh")).read_text()
    assert "#SBATCH --ntasks-per-node=1" in submission and "--gpus-per-node" not in submission, submission


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.distributed
def test_srun_with_two_tasks_writes_one_run_folder(tmp_path, slurm_cluster):
    job = sbatch(
        tmp_path,
        *TINY,
        *QUIET,
        "trainer.max_epochs=1",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "strategy=ddp",
        options=("--ntasks-per-node=2", "--cpus-per-task=1"),
    )
    fields = wait_for(job, 120)
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), job_output(tmp_path, job)[-3000:]
    runs = sorted(p.name for p in (tmp_path / "train" / "runs").iterdir())
    assert runs == [f"slurm-{job}"], runs
    run = tmp_path / "train" / "runs" / runs[0]
    assert (run / "metrics.json").is_file() and not (run / "run.lock").exists()
    output = job_output(tmp_path, job)
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in output and "GLOBAL_RANK: 1, MEMBER: 2/2" in output, output[-3000:]
    assert "Starting with 2 processes" in output, "one DDP group of the job's two tasks"


def submit_time_limit_job(tmp_path: Path) -> str:
    """A job of `--time=1` with `time_limit=auto`: Slurm 22.05 sets no SLURM_JOB_END_TIME, so the end comes from
    squeue. The template's SIGUSR1@90 would come at once in a 60 s job (and requeue it): a harmless SIGCONT instead,
    so litforge's own stop is what the test sees."""
    endless = ["trainer.max_epochs=100000", "callbacks.early_stopping=null"]
    tmp_path.mkdir(parents=True, exist_ok=True)  # sbatch writes the job's output there, and does not make folders
    return sbatch(tmp_path, *TINY, *QUIET, *endless, "time_limit=auto", options=("--time=1", "--signal=CONT@1"))


def check_time_limit_job(tmp_path: Path, job: str) -> None:
    """It stopped in time with a resumable checkpoint and exit code 75, about 30 s (the margin's floor) before SLURM
    would have killed it."""
    fields = wait_for(job, 100)
    output = job_output(tmp_path, job)
    assert fields["ExitCode"] == "75:0", (fields["JobState"], output[-3000:])
    assert "time_limit: stopped at step" in output
    run = tmp_path / "train" / "runs" / f"slurm-{job}"
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "metrics.json").exists()


@pytest.mark.slurm
@pytest.mark.slow
def test_a_requeued_job_continues_in_its_own_folder_a_live_folder_is_left_alone_and_time_limit_auto_asks_squeue(
    tmp_path, slurm_cluster, capsys
):
    """`scontrol requeue` of a running sbatch job: SIGTERM saves last.ckpt, the attempt after it (same job id, after
    the cluster's cred_expire=10 s) continues from it in slurm-<job id>, not from step 0. While the first attempt runs,
    a second `resume=auto` skips its folder and `resume=<its folder>` is refused in one line. Meanwhile a job of
    `--time=1` with `time_limit=auto` runs beside it (`submit_time_limit_job`): one wait on the cluster for both."""
    from litforge.checkpointing.resume import resolve
    from litforge.cli.preflight import prepare_command_line

    limit_job = submit_time_limit_job(tmp_path / "limit")
    epochs = 12
    prepare_command_line(CONF, "train", ["train.py", f"paths.log_dir={tmp_path}"])  # warm: the checks below are quick
    # the first attempt paced to at least 12 s (tests/faults.py), so it is still running when the test requeues it
    pace = ["+callbacks.pace._target_=faults.PaceFirstAttempt", "+callbacks.pace.sleep=0.25"]
    tests_dir = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    job = sbatch(tmp_path, *TINY, *QUIET, f"trainer.max_epochs={epochs}", *pace, env=tests_dir)
    run = tmp_path / "train" / "runs" / f"slurm-{job}"
    deadline = time.monotonic() + 90
    while not (run / "checkpoints" / "last.ckpt").exists():
        assert time.monotonic() < deadline and job_fields(job).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING")
        time.sleep(0.2)
    assert (run / "run.lock").is_file()
    capsys.readouterr()
    assert resolve("auto", tmp_path, "train") is None, "the only interrupted-looking run is live"
    assert f"skipping {run}, still running (job {job} on host" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        prepare_command_line(CONF, "train", ["train.py", f"paths.log_dir={tmp_path}", f"resume={run}"])
    refusal = capsys.readouterr().err.strip()
    assert refusal.startswith("litforge: error: resume=") and f"in use by a running job (job {job}" in refusal
    assert len(refusal.splitlines()) == 1, refusal

    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
    fields = wait_for(job, 150, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
    output = job_output(tmp_path, job)
    while fields.get("Restarts") == "0" and fields["JobState"] == "COMPLETED":  # pragma: no cover - finished first
        pytest.fail(f"the job finished before the requeue took effect: {output[-2000:]}")
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), output[-3000:]
    assert sorted(p.name for p in run.parent.iterdir()) == [run.name]
    assert output.count("run folder:\n" + str(run)) == 3, "both attempts' start and the summary: one folder"
    resumed = output.split("stopped by SIGTERM", 1)[1]
    assert re.search(r"Resuming from \S+/slurm-\d+/checkpoints/last\.ckpt", resumed), resumed[-3000:]
    assert "Restored all states from the checkpoint" in resumed, resumed[-3000:]
    import torch

    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == epochs * 4 and (run / "metrics.json").is_file()
    check_time_limit_job(tmp_path / "limit", limit_job)
