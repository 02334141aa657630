"""What a person reads at the end of a job: the paths they need next, whole on lines of their own and only for files
that are there, the same summary in the job's log file, and how to continue after Ctrl-C."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, TINY, run_cli, single_run

pytestmark = pytest.mark.slow

FAULTS_ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}


def _paths_after(output: str, label: str) -> list[str]:
    """The lines right after each `<label>:` line (the summary prints a path alone on the line below its label)."""
    lines = output.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == f"{label}:"]


def test_the_summary_prints_each_path_whole_and_the_job_log_keeps_it(tmp_path: Path):
    deep = tmp_path / ("a_long_folder_name_" * 6) / "logs"  # longer than any terminal: rich would wrap it
    result = run_cli("train.py", *TINY, log_dir=deep, env={"OMP_NUM_THREADS": ""})  # threads=auto decides
    assert result.returncode == 0, result.output[-3000:]
    run_dir = single_run(deep)
    assert _paths_after(result.stdout, "run folder") == [str(run_dir)] * 2  # at the start and at the end
    assert _paths_after(result.stdout, "last checkpoint") == [str(run_dir / "checkpoints" / "last.ckpt")]
    (best,) = _paths_after(result.stdout, "best checkpoint")
    assert Path(best).is_file() and Path(best).parent == run_dir / "checkpoints"
    assert _paths_after(result.stdout, "view it") == [f"tensorboard --logdir {run_dir} --host 127.0.0.1"]
    start = result.stdout.splitlines()[:4]  # a short start: what runs, on how many threads, where it writes
    assert start[0].startswith("train: data=digits model=mlp task=classification") and start[2:] == [
        "run folder:",
        str(run_dir),
    ], start
    cores = len(os.sched_getaffinity(0))  # no cgroup quota here: the mask's cores, less those busy elsewhere
    threads = re.fullmatch(rf"threads: (\d+) intra-op, \1 inter-op \(auto: {cores} usable cores(.*)\)", start[1])
    assert threads and 1 <= int(threads[1]) <= cores, start[1]
    log = (run_dir / "train.log").read_text()
    assert f"last checkpoint:\n{run_dir / 'checkpoints' / 'last.ckpt'}" in log and "test/acc: " in log


def test_a_run_that_writes_no_checkpoint_claims_none(tmp_path: Path):
    result = run_cli("train.py", *TINY, "debug=fdr", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    for label in ("best checkpoint", "last checkpoint", "view it"):
        for path in _paths_after(result.stdout, label):
            assert Path(path.split()[-3] if label == "view it" else path).exists(), (label, path)
    assert not _paths_after(result.stdout, "last checkpoint"), "fast_dev_run writes no checkpoint"
    assert "tested: the last weights, in memory (no checkpoint was written: trainer.fast_dev_run" in result.stdout


def test_a_run_that_never_validated_says_which_weights_it_tested(tmp_path: Path):
    result = run_cli("train.py", *TINY, "trainer.max_steps=3", log_dir=tmp_path)  # stops before the epoch's validation
    assert result.returncode == 0, result.output[-3000:]
    assert "tested: the last weights (no val/acc was logged before training ended" in result.stdout, result.stdout
    assert not _paths_after(result.stdout, "best checkpoint")
    normal = run_cli("train.py", *TINY, log_dir=tmp_path / "normal")
    assert "tested: the best checkpoint by val/acc" in normal.stdout, normal.stdout[-2000:]


def test_ctrl_c_says_how_to_continue_and_the_run_continues(tmp_path: Path):
    args = [*TINY, "trainer.max_epochs=3", "trainer.limit_train_batches=6", "callbacks.early_stopping=null"]
    fault = ["+callbacks.fault._target_=faults.SignalAt", "+callbacks.fault.step=9", "+callbacks.fault.signal=SIGINT"]
    result = run_cli("train.py", *args, *fault, log_dir=tmp_path, env=FAULTS_ENV)
    # where the signal went, if the run was not stopped (seen once in CI: it trained to the end)
    seen = [line for line in result.output.splitlines() if "FAULT" in line or "Interrupt" in line or "ignored" in line]
    assert result.returncode == 130, (seen, result.output[-3000:])  # 128 + SIGINT, as a shell reports it
    assert "Traceback" not in result.output, result.output[-3000:]
    run_dir = single_run(tmp_path)
    assert (
        f"stopped by Ctrl-C at step 9 (epoch 1); the last checkpoint is {run_dir / 'checkpoints' / 'last.ckpt'}. "
        f"Continue from it with: python train.py resume={run_dir}" in result.output
    ), result.output[-3000:]
    no_fault = "+callbacks.fault.step=1000"  # the run's own overrides come back with resume=; this one wins
    resumed = run_cli("train.py", f"resume={run_dir}", no_fault, log_dir=tmp_path, env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert (run_dir / "metrics.json").exists()


def test_export_names_every_file_it_wrote(tmp_path: Path):
    trained = run_cli("train.py", *TINY, log_dir=tmp_path)
    assert trained.returncode == 0, trained.output[-3000:]
    ckpt = single_run(tmp_path) / "checkpoints" / "last.ckpt"
    result = run_cli("export.py", f"ckpt_path={ckpt}", "quantize=[]", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    written = _paths_after(result.stdout, "written")
    out = single_run(tmp_path, "export")
    assert str(out / "model.onnx") in written and str(out / "compression_report.md") in written, written
    assert "model.onnx" in (out / "export.log").read_text()

    predicted = run_cli("predict.py", f"ckpt_path={ckpt}", log_dir=tmp_path)
    assert predicted.returncode == 0, predicted.output[-3000:]
    assert re.search(r"│ predictions +│ +359 │", predicted.stdout), predicted.stdout  # a count, not 359.0000


def test_a_missing_checkpoint_names_the_newest_of_its_own_run_only(tmp_path: Path):
    """Beside it, or in the checkpoints/ of the run folder it names; never those of other runs deeper down (a path
    in the clone's root named every run's under logs/, whatever the task)."""
    from litforge.checkpointing.load import load_checkpoint
    from litforge.core.errors import CheckpointError

    run = tmp_path / "train/runs/a"
    older, newer, other = (
        run / "checkpoints/epoch1.ckpt",
        run / "checkpoints/last.ckpt",
        tmp_path / "train/runs/b/x.ckpt",
    )
    for path in (older, newer, other):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    os.utime(older, (1, 1))
    for missing in (run / "last.ckpt", run / "checkpoints/epoch9.ckpt"):
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(missing)
        assert f"does not exist. The newest beside it: {newer}, {older}. Pass" in str(info.value), str(info.value)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "nope.ckpt")
    assert (
        str(info.value)
        == f"checkpoint {tmp_path / 'nope.ckpt'} does not exist. Pass ckpt_path=<run>/checkpoints/last.ckpt."
    )
