"""The resume rule's one home (litforge.checkpointing.resume.decide): what `resume=` and `ckpt_path=` continue.

The CLI asks it before Hydra starts (which run folder to write in again) and the training job asks it again (which
checkpoint to fit from); the slow, real kill-and-resume runs are in tests/test_reliability.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF
from litforge.checkpointing.resume import Resume, decide
from litforge.core.errors import CheckpointError, ConfigError


def make_run(
    log_dir: Path,
    name: str,
    *,
    mtime: int,
    finished: bool = False,
    ckpt: str = "checkpoints/last.ckpt",
    task_name: str = "train",
) -> Path:
    """A run folder with one checkpoint written at `mtime` (seconds), finished when it holds metrics.json."""
    run = log_dir / task_name / "runs" / name
    path = run / ckpt
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"weights")
    os.utime(path, (mtime, mtime))
    if finished:
        (run / "metrics.json").write_text("{}")
    return run


def test_nothing_to_resume_starts_fresh_in_a_new_folder(tmp_path):
    assert decide(None, None, tmp_path, "train") == Resume(checkpoint=None, run_dir=None, asked=None)
    assert decide(False, None, tmp_path, "train").asked is None  # resume=false


def test_ckpt_path_starts_a_new_run_folder_from_that_file(tmp_path):
    decided = decide(None, "some/epoch_3.ckpt", tmp_path, "train")
    assert decided == Resume(checkpoint="some/epoch_3.ckpt", run_dir=None, asked=None)
    assert decide(None, "b.ckpt", tmp_path, "train", in_multirun=True).checkpoint == "b.ckpt", "a sweep may start so"


@pytest.mark.parametrize(("resume", "ckpt_path"), [("auto", None), (None, "last")])
def test_auto_without_an_interrupted_run_starts_a_new_one(resume, ckpt_path, tmp_path):
    make_run(tmp_path, "done", mtime=1_000, finished=True)
    make_run(tmp_path, "other_task", mtime=2_000, task_name="other")
    assert decide(resume, ckpt_path, tmp_path, "train") == Resume(checkpoint=None, run_dir=None, asked="auto")


@pytest.mark.parametrize(("resume", "ckpt_path"), [("auto", None), (None, "last")])
def test_auto_continues_the_newest_interrupted_run_of_the_task_in_its_folder(resume, ckpt_path, tmp_path):
    make_run(tmp_path, "old", mtime=1_000)
    newest = make_run(tmp_path, "newest", mtime=3_000)
    make_run(tmp_path, "finished_later", mtime=4_000, finished=True)
    make_run(tmp_path, "other_task", mtime=5_000, task_name="other")
    decided = decide(resume, ckpt_path, tmp_path, "train")
    assert decided == Resume(
        checkpoint=str((newest / "checkpoints" / "last.ckpt").resolve()), run_dir=newest.resolve(), asked="auto"
    )


def test_a_run_folder_continues_from_its_newest_checkpoint(tmp_path):
    run = make_run(tmp_path, "r", mtime=1_000)
    hpc = run / "hpc_ckpt_1.ckpt"  # Lightning's SLURM pre-emption save, newer than last.ckpt
    hpc.write_bytes(b"weights")
    os.utime(hpc, (2_000, 2_000))
    decided = decide(str(run), None, tmp_path, "train")
    assert (decided.checkpoint, decided.run_dir, decided.asked) == (str(hpc.resolve()), run.resolve(), str(run))


def test_a_ckpt_file_continues_in_the_run_folder_that_holds_it(tmp_path):
    run = make_run(tmp_path, "r", mtime=1_000)
    in_checkpoints = run / "checkpoints" / "last.ckpt"
    assert decide(str(in_checkpoints), None, tmp_path, "train") == Resume(
        checkpoint=str(in_checkpoints.resolve()), run_dir=run.resolve(), asked=str(in_checkpoints)
    )
    loose = tmp_path / "elsewhere" / "x.ckpt"
    loose.parent.mkdir()
    loose.write_bytes(b"weights")
    assert decide(str(loose), None, tmp_path, "train").run_dir == loose.parent.resolve()


def test_the_jobs_second_call_agrees_with_the_clis_first(tmp_path):
    """The CLI rewrites resume=auto to resume=<the checkpoint it found>: the job's own call must find the same."""
    make_run(tmp_path, "r", mtime=1_000)
    first = decide("auto", None, tmp_path, "train")
    again = decide(first.checkpoint, None, tmp_path, "train")
    assert (again.checkpoint, again.run_dir) == (first.checkpoint, first.run_dir) != (None, None)


@pytest.mark.parametrize(
    ("resume", "ckpt_path", "multirun", "says"),
    [
        ("auto", "a.ckpt", False, "pass either resume=auto (continue a run in its folder) or ckpt_path=<file>"),
        ("auto", "last", False, "pass either resume=... or ckpt_path=last, not both"),
        ("auto", None, True, "resume= continues one run; a sweep's jobs each take ckpt_path=<file>"),
        (None, "last", True, "resume= continues one run"),
    ],
)
def test_contradictions_are_refused_before_anything_is_looked_up(resume, ckpt_path, multirun, says, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(says)):
        decide(resume, ckpt_path, tmp_path / "absent", "train", in_multirun=multirun)


def test_a_folder_without_checkpoints_or_a_missing_path_is_refused(tmp_path):
    empty = tmp_path / "train" / "runs" / "empty"
    empty.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="holds no checkpoints/last.ckpt"):
        decide(str(empty), None, tmp_path, "train")
    with pytest.raises(CheckpointError, match="does not exist: pass resume=auto"):
        decide(str(tmp_path / "nope"), None, tmp_path, "train")


def test_the_cli_writes_the_resumed_run_in_its_own_folder_with_its_own_overrides(tmp_path, capsys):
    """preflight turns the decision into `hydra.run.dir=<run>` and `resume=<checkpoint>`, the run's overrides first."""
    from litforge.cli.preflight import prepare_command_line

    run = make_run(tmp_path, "r", mtime=1_000)
    (run / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create(["trainer.max_epochs=3", "seed=7"]), run / ".hydra" / "overrides.yaml")
    argv = ["train.py", f"paths.log_dir={tmp_path}", "resume=auto", "seed=8"]
    prepare_command_line(CONF, "train", argv)
    assert argv[1:] == [
        "trainer.max_epochs=3",
        "seed=8",
        f"paths.log_dir={tmp_path}",
        f"hydra.run.dir='{run.resolve()}'",
        f"resume='{(run / 'checkpoints' / 'last.ckpt').resolve()}'",
    ]
    assert f"litforge: resuming {run.resolve()} from last.ckpt" in capsys.readouterr().err


def test_the_cli_starts_a_new_run_when_auto_finds_nothing(tmp_path, capsys):
    from litforge.cli.preflight import prepare_command_line

    argv = ["train.py", f"paths.log_dir={tmp_path}", "ckpt_path=last"]
    prepare_command_line(CONF, "train", argv)
    assert argv[1:] == [f"paths.log_dir={tmp_path}"]
    assert "resume=auto: no interrupted run under" in capsys.readouterr().err


def test_the_cli_refuses_resume_with_a_ckpt_path_in_one_line(tmp_path, capsys):
    from litforge.cli.preflight import prepare_command_line

    argv = ["train.py", f"paths.log_dir={tmp_path}", "resume=auto", "ckpt_path=a.ckpt"]
    with pytest.raises(SystemExit) as info:
        prepare_command_line(CONF, "train", argv)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("litforge: error: pass either resume=auto") == 1 and "Traceback" not in err, err
