"""The command line is checked before Hydra starts a job (litforge.cli.preflight): one line, the fix, a fraction of a
second.

In-process, through the functions the entry scripts call; tests/test_bad_input.py runs some of the same command
lines through the real CLI. The values themselves are judged by the typed signatures (tests/test_validation.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CONF, make_image_folder, stub_checkpoint
from litforge.core.errors import CheckpointError, ConfigError

PREFLIGHT = [
    # (overrides, the one line it must say)
    (["data.batch_size=0"], "data.batch_size=0: expected an integer >= 1, e.g. data.batch_size=64"),
    (["optimizer.lr=-1"], "optimizer.lr=-1: expected a number > 0, e.g. optimizer.lr=0.001"),
    (["hparams_search=digits_optuna"], "add -m (python train.py -m hparams_search=digits_optuna)"),
    (["optimizer.lr=0.1,0.01"], "optimizer.lr=0.1,0.01 is a sweep (one job per value): add -m"),
    (["model=resnt"], "model=resnt is not an option of model; did you mean model=resnet?"),
    (["callbacks=[default,prunin]"], "callbacks=prunin is not an option of callbacks; did you mean callbacks=pruning?"),
    (["trainer.max_epoch=3"], "trainer has no key `max_epoch`; did you mean trainer.max_epochs=3?"),
    (["data.fold=2"], "data.fold=2 takes effect only with data.num_folds (K-fold cross-validation), which is null"),
    (["dat.batch_size=3"], "train's config has no key `dat`; did you mean data.batch_size=3?"),
    (["data=image_folder"], "data.root has no value and is required"),
    (["model=cnn", "model.channels=32"], "model.channels=32: expected a non-empty list"),
    (["scheduler=step", "scheduler.scheduler.step_size=0"], "scheduler.scheduler.step_size=0: expected an integer"),
    (["optimizer=sgd", "optimizer.momentum=0"], "optimizer.nesterov=true needs momentum"),
    (["trainer.enable_checkpointing=false"], "also pass callbacks.model_checkpoint=null"),
    (["experiment=cartpole_dqn", "task.gamma=1.5"], "task.gamma=1.5: expected a number in [0, 1]"),
    (["callbacks=[default,pruning]", "callbacks.pruning.amount=1"], "callbacks.pruning.amount=1: expected a number"),
    (["strategy=local_sgd", "strategy.period=0"], "strategy.period=0: expected an integer >= 1"),
    (["logger.tensorboard.default_hp_metric=3"], "logger.tensorboard.default_hp_metric=3: expected true or false"),
    (["trainer.plugins=3"], "trainer.plugins=3: expected a list"),
    # a launcher without -m trained here without a word (issue #39)
    (["hydra/launcher=slurm"], "hydra/launcher=slurm is used only by a multirun: add -m (python train.py -m"),
    # an unset shell variable (`ckpt_path=$CKPT`) trained from scratch without a word; `~` is Hydra's lexer error
    (["ckpt_path="], "ckpt_path= is empty (a shell variable that is not set?): pass ckpt_path=<a path>"),
    (["data=csv", "data.path=~/t.csv"], "does not take `~`; write the home folder out: data.path=/"),
]


@pytest.mark.parametrize(("overrides", "says"), PREFLIGHT, ids=[" ".join(o) for o, _ in PREFLIGHT])
def test_the_command_line_is_refused_before_hydra_starts(overrides: list[str], says: str, tmp_path: Path):
    from litforge.cli.preflight import checked_overrides

    with pytest.raises(ConfigError) as info:
        checked_overrides(CONF, "train", [f"paths.log_dir={tmp_path}", *overrides])
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_good_command_lines_pass_unchanged(tmp_path: Path):
    from litforge.cli.preflight import checked_overrides

    for overrides in (
        ["trainer.gradient_clip_val=0.5", "model=cnn", "model.channels=[8,16]"],
        ["data=image_folder", f"data.root={make_image_folder(tmp_path / 'images')}", "data.image_size=[32,48]"],
        ["experiment=cartpole_dqn", "trainer.max_epochs=-1", "trainer.max_steps=100"],
        ["+callbacks.extra._target_=pytorch_lightning.callbacks.EarlyStopping", "+callbacks.extra.mode=min"],
    ):
        args = [f"paths.log_dir={tmp_path}", *overrides]
        assert checked_overrides(CONF, "train", args) == args
    ckpt = stub_checkpoint(tmp_path)
    for job in ("eval", "predict", "export", "generate"):
        args = [f"paths.log_dir={tmp_path}", f"ckpt_path={ckpt}"]
        assert checked_overrides(CONF, job, args) == args
        with pytest.raises(CheckpointError, match="does not exist"):  # the file is judged before Hydra starts
            checked_overrides(CONF, job, [f"paths.log_dir={tmp_path}", "ckpt_path=run/checkpoints/last.ckpt"])
    with pytest.raises(ConfigError, match="ckpt_path has no value and is required"):
        checked_overrides(CONF, "eval", [f"paths.log_dir={tmp_path}"])


SEARCH = "hparams_search=digits_optuna"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-m", "model=cnn,mlpp"], "model=mlpp is not an option of model; did you mean model=mlp?"),
        (["-m", "resume=auto", "seed=1,2"], "resume=auto continues one run"),
        (["-m", "ckpt_path=last", "seed=1,2"], "ckpt_path=last continues one run"),  # was a traceback in job 0
        (["-m", SEARCH, "hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0: expected an integer >= 1"),  # Hydra's
        (["-m", "logger=null,csv"], "logger=null,csv: a sweep cannot switch logger off in some of its jobs"),  # Hydra's
        (["-m", "model.init_from=a.ckpt,b.ckpt"], "model.init_from has moved to task.init_from"),
        # issue #39: every value of a sweep is checked before its first job (job 0 ran, job 1 ended in a traceback)
        (["-m", "model.dropout=choice(0.1,1.5)"], "model.dropout=1.5: expected a number in [0, 1)"),
        (["-m", "seed=range(-3,5)"], "seed=-3: expected an integer in [0, 4294967295]"),  # a range: its two ends
        (["-m", "trainer.max_epoch=1,2"], "trainer has no key `max_epoch`; did you mean trainer.max_epochs=1?"),
        (["-m", "data.fold=range(5)"], "takes effect only with data.num_folds"),  # was 5 equal runs
        (["-m", "optimizer.lr=interval(0.0,0.1)"], "optimizer.lr=interval(0.0,0.1): an interval is sampled by a"),
        # Optuna's space: each value its interval can give, from the command line or the search config
        (["-m", SEARCH, "model.dropout=interval(0.0,1.5)"], "model.dropout=1.5: expected a number in [0, 1)"),
        (["-m", SEARCH, "data.batch_size=tag(int,interval(0,64))"], "data.batch_size=0: expected an integer >= 1"),
        (["-m", SEARCH, "data.batch_size=interval(16,64)"], "data.batch_size=16.0: expected an integer >= 1"),
        (["-m", SEARCH, "optimizer.lr=tag(log,interval(0,0.1))"], "optimizer.lr=tag(log,interval(0,0.1)): `low > 0`"),
        (["-m", SEARCH], None),  # the shipped search: every searched key exists and takes every value it can get
    ],
)
def test_every_value_of_a_sweep_is_checked_before_its_first_job(
    args: list[str], says: str | None, tmp_path: Path, capsys
):
    from litforge.cli.preflight import prepare_command_line

    argv = ["train.py", f"paths.log_dir={tmp_path / 'logs'}", *args]
    if says is None:
        prepare_command_line(CONF, "train", argv)
        return
    with pytest.raises(SystemExit) as info:
        prepare_command_line(CONF, "train", argv)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("litforge: error:") == 1 and says in err, err
    assert not (tmp_path / "logs").exists(), "the check writes nothing, not even the log folder"


def test_a_sweep_never_writes_its_jobs_into_another_runs_or_sweeps_folder(tmp_path: Path, capsys):
    """`hydra.sweep.dir=<a run folder>` wrote job folders 0, 1, ... into it (and over an earlier grid sweep's); an
    Optuna sweep's own folder (optuna.db) is where its study resumes, so that one is taken."""
    from litforge.cli.preflight import prepare_command_line

    run = tmp_path / "runs" / "finished"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    argv = ["train.py", "-m", f"paths.log_dir={tmp_path / 'logs'}", f"hydra.sweep.dir={run}", "seed=1,2"]
    with pytest.raises(SystemExit):
        prepare_command_line(CONF, "train", argv)
    assert f"hydra.sweep.dir={run} holds the results of another run or sweep" in capsys.readouterr().err
    study = tmp_path / "study"
    study.mkdir()
    for name in ("multirun.yaml", "optuna.db"):
        (study / name).write_text("")
    prepare_command_line(CONF, "train", [*argv[:3], f"hydra.sweep.dir={study}", "seed=1,2"])


def test_a_search_configs_space_is_checked_like_the_command_lines(tmp_path: Path, capsys):
    """conf/hparams_search/<name>.yaml's `hydra.sweeper.params`, here a user's own (a searchpath folder) whose
    dropout interval reaches 1.5: refused in one line before the study starts."""
    from litforge.cli.preflight import prepare_command_line

    shipped = (CONF / "hparams_search" / "digits_optuna.yaml").read_text()
    assert "model.dropout: interval(0.0, 0.5)" in shipped
    (tmp_path / "hparams_search").mkdir()
    (tmp_path / "hparams_search" / "wide.yaml").write_text(shipped.replace("interval(0.0, 0.5)", "interval(0.0, 1.5)"))
    argv = ["train.py", "-m", f"paths.log_dir={tmp_path / 'logs'}", f"hydra.searchpath=[file://{tmp_path}]"]
    with pytest.raises(SystemExit):
        prepare_command_line(CONF, "train", [*argv, "hparams_search=wide"])
    err = capsys.readouterr().err
    assert err.count("litforge: error:") == 1 and "model.dropout=1.5: expected a number in [0, 1)" in err, err


def test_a_sweeps_jobs_to_check_grow_with_what_was_typed_not_with_the_grid():
    """Every combination up to the limit (relations between swept keys are judged too), then each value once with
    the other keys at their first value; a range gives its two ends, however long it is."""
    from litforge.cli.command_line import parse, sweep_jobs

    grid = sweep_jobs(parse(["a=1,2", "b=x,y", "c=3"]))
    assert sorted(grid) == sorted([[f"a={a}", f"b={b}", "c=3"] for a in (1, 2) for b in "xy"])
    assert sweep_jobs(parse(["a=1,2,3", "b=x,y"]), limit=4) == [
        ["a=1", "b=x"], ["a=2", "b=x"], ["a=3", "b=x"], ["a=1", "b=y"],
    ]  # fmt: skip
    assert sweep_jobs(parse(["seed=range(0,1000000)"])) == [["seed=0"], ["seed=999999"]]
    assert sweep_jobs(parse(["x=tag(int,interval(1,8))", "+y=1"])) == [["x=1", "+y=1"], ["x=8", "+y=1"]]


@pytest.mark.parametrize("hash_seed", [1, 2])
def test_a_refused_command_line_costs_no_torch_import(hash_seed: int, tmp_path: Path):
    """The fast path: the mistake is reported before any job module (and so torch or Lightning) is imported.

    Real: `python train.py` in a fresh interpreter (conftest.run_fresh_probe: not the fork server, where torch is
    already imported), under two hash seeds (set and dict-of-str order differ between them), which reports the heavy
    modules it had imported when it exited."""
    from conftest import run_fresh_probe

    result, imported = run_fresh_probe("train.py", "trainer.max_epochs=0", log_dir=tmp_path, hash_seed=hash_seed)
    assert result.returncode == 1 and imported == [], (imported, result.output[-3000:])
    assert result.stderr.count("litforge: error: trainer.max_epochs=0") == 1, result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written"
