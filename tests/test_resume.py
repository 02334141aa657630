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

from conftest import CONF, TINY, run_cli, single_run, stub_checkpoint
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
    stub_checkpoint(run / "checkpoints")  # a litforge checkpoint: the resume is checked before Hydra starts
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


# ---- a refused command writes nothing (litforge.checkpointing.resume.check_early, checkpointing.folders) ------------
def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _model_run(tmp_path: Path, model: str) -> Path:
    """An interrupted run trained with `model=<model>`: its checkpoint records that net, its overrides that option."""
    import torch

    from litforge.cli.command_line import compose
    from litforge.core.instantiate import to_plain

    run = make_run(tmp_path, "r", mtime=1_000)
    net = to_plain(compose(CONF, "train", [f"model={model}"]).model)
    meta = {"task_class": "litforge.tasks.classification.ClassificationTask", "run_config": {}}
    checkpoint = {"state_dict": {}, "hyper_parameters": {"net": net}, "litforge": meta}
    torch.save(checkpoint, run / "checkpoints" / "last.ckpt")
    (run / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create([f"model={model}"]), run / ".hydra" / "overrides.yaml")
    return run


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["task=regression"], "was written by task ClassificationTask, but this run configures RegressionTask"),
        (["model=mlp"], "holds a different model than this run configures (checkpoint: CNN("),
        ([], None),  # the run's own model=cnn, from its recorded overrides: continues
    ],
    ids=["another-task", "another-model", "its-own-overrides"],
)
def test_a_resume_that_cannot_fit_the_checkpoint_is_refused_before_hydra_writes_in_the_run(
    extra, says, tmp_path, capsys
):
    """`resume=<a run> task=<another task>` was refused only inside the job, after Hydra had written the refused
    overrides into the run's .hydra/: then `resume=<that run>` failed too. Now the checkpoint is judged on the merged
    overrides (the run's own, then yours) before Hydra starts, and the run's folder is not touched."""
    from litforge.cli.preflight import prepare_command_line

    run = _model_run(tmp_path, "cnn")
    before = _files(run)
    argv = ["train.py", f"paths.log_dir={tmp_path}", f"resume={run}", *extra]
    if says is None:
        prepare_command_line(CONF, "train", argv)
        assert "model=cnn" in argv and f"hydra.run.dir='{run.resolve()}'" in argv, argv
    else:
        with pytest.raises(SystemExit):
            prepare_command_line(CONF, "train", argv)
        errors = [line for line in capsys.readouterr().err.splitlines() if "litforge: error:" in line]
        assert len(errors) == 1 and says in errors[0], errors
    assert _files(run) == before


def _as_hydra_and_the_job_write(run: Path) -> None:
    """What a refused attempt wrote before the refusal: Hydra's .hydra/ and log, the job's provenance and lock."""
    (run / ".hydra").mkdir(exist_ok=True)
    (run / ".hydra" / "overrides.yaml").write_text("- task=regression\n")
    (run / ".hydra" / "config.yaml").write_text("task: regression\n")
    with (run / "train.log").open("a") as log:
        log.write("[ERROR] - could not build the task\n")
    (run / "provenance.json").write_text('{"status": "failed"}')
    (run / "tensorboard").mkdir(exist_ok=True)
    (run / "tensorboard" / "events.out.tfevents.1").write_bytes(b"hparams")


def test_a_refusal_inside_the_job_leaves_an_earlier_run_as_it_was_and_no_new_folder(tmp_path):
    """`resume=<a file inside a finished run>` rewrote that run's .hydra/*.yaml and train.log and turned its
    provenance from finished to failed; a refusal in a new run left its folder behind. What Hydra's callback noted
    before (note_folder) is put back after a refusal (undo_refused), unless the job wrote a checkpoint or metrics."""
    from litforge.checkpointing.folders import note_folder, undo_refused

    run = make_run(tmp_path, "earlier", mtime=1_000, finished=True)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (run / "train.log").write_text("trained\n")
    (run / "provenance.json").write_text('{"status": "finished"}')
    before = _files(run)
    noted = note_folder(run)
    _as_hydra_and_the_job_write(run)
    assert undo_refused(noted) and _files(run) == before and not (run / "tensorboard").exists()

    new = tmp_path / "train" / "runs" / "new"  # `train/runs` exists: only the run's own folder goes
    noted = note_folder(new)
    new.mkdir()
    _as_hydra_and_the_job_write(new)
    assert undo_refused(noted) and not new.exists() and new.parent.is_dir()
    fresh = tmp_path / "fresh" / "train" / "runs" / "new"  # folders above it that the command made go too
    noted = note_folder(fresh)
    fresh.mkdir(parents=True)
    _as_hydra_and_the_job_write(fresh)
    assert undo_refused(noted) and not (tmp_path / "fresh").exists()

    noted = note_folder(run)  # a run that wrote a checkpoint ran: its folder is left as it is
    _as_hydra_and_the_job_write(run)
    (run / "checkpoints" / "epoch=0.ckpt").write_bytes(b"weights")
    assert not undo_refused(noted) and (run / "tensorboard").exists()


@pytest.mark.slow
def test_after_a_refused_resume_the_documented_resume_continues_the_run(tmp_path):
    """The case of issue #39: refused `resume=<run> task=regression`, then `resume=<run>` continues that run with
    its own overrides (and the one given), and its record of them changes only then."""
    log_dir = tmp_path / "logs"
    first = run_cli("train.py", *TINY, "trainer.max_epochs=1", "test_after_training=false", log_dir=log_dir)
    assert first.returncode == 0, first.output[-3000:]
    run = single_run(log_dir)
    (run / "metrics.json").unlink()  # interrupted after its first epoch
    before = _files(run)
    refused = run_cli("train.py", f"resume={run}", "task=regression", log_dir=log_dir)
    assert refused.returncode == 1 and "resume with the same task=" in refused.output, refused.output[-3000:]
    assert _files(run) == before
    resumed = run_cli("train.py", f"resume={run}", "trainer.max_epochs=2", log_dir=log_dir)
    assert resumed.returncode == 0, resumed.output[-3000:]
    overrides = (run / ".hydra" / "overrides.yaml").read_text()
    assert "trainer.max_epochs=2" in overrides and "task=" not in overrides, overrides
    assert single_run(log_dir) == run
