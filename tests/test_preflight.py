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


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-m", "model=cnn,mlpp"], "model=mlpp is not an option of model; did you mean model=mlp?"),
        (["-m", "resume=auto", "seed=1,2"], "resume= continues one run"),
        (["-m", "model.init_from=a.ckpt,b.ckpt"], "model.init_from has moved to task.init_from"),
        # values are each job's to check: the sweep records the failed job and runs the others (tests/test_sweeps.py)
        (["-m", "model.dropout=choice(0.1,1.5)", "optimizer.lr=interval(0.0,0.1)"], None),
    ],
)
def test_a_sweep_is_refused_only_for_what_fails_every_job(args: list[str], says: str | None, tmp_path: Path, capsys):
    from litforge.cli.preflight import prepare_command_line

    argv = ["train.py", f"paths.log_dir={tmp_path}", *args]
    if says is None:
        prepare_command_line(CONF, "train", argv)
        return
    with pytest.raises(SystemExit) as info:
        prepare_command_line(CONF, "train", argv)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("litforge: error:") == 1 and says in err, err


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
