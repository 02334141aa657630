"""Optuna sweeps (litforge's own Hydra sweeper plugin), parallel trials with joblib, and result aggregation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from conftest import CONF, TINY, run_cli

SEARCH = "hparams_search=digits_optuna"


def test_search_space_parses_hydra_grammar_into_optuna_distributions():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from hydra_plugins.litforge_optuna.sweeper import search_space, trial_overrides

    space, fixed = search_space(
        {
            "optimizer.lr": "tag(log, interval(1e-4, 1e-1))",
            "model.hidden_dims": "choice([64,64], [128])",
            "data.batch_size": "range(16, 80, 16)",
            "model.depth": "tag(int, interval(2, 8))",
            "seed": "3",
        },
        ["trainer.max_epochs=2", "model.depth=5", "optimizer=adam,sgd"],
    )
    assert space["optimizer.lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert space["model.hidden_dims"] == CategoricalDistribution(["[64,64]", "[128]"])
    assert space["data.batch_size"] == IntDistribution(16, 64, step=16)
    assert space["optimizer"] == CategoricalDistribution(["adam", "sgd"])
    assert "model.depth" not in space, "a command-line value fixes a parameter the search config samples"
    assert fixed == ["seed=3", "trainer.max_epochs=2", "model.depth=5"]
    assert trial_overrides({"model.hidden_dims": "[64,64]", "optimizer.lr": 0.001, "data.batch_size": 32}) == [
        "model.hidden_dims=[64,64]",
        "optimizer.lr=0.001",
        "data.batch_size=32",
    ]


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local", "submitit_slurm"])
def test_search_config_composes_with_the_litforge_sweeper_and_parallel_launchers(launcher: str, tmp_path: Path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[SEARCH, f"hydra/launcher={launcher}", f"paths.log_dir={tmp_path}"],
            return_hydra_config=True,
        )
    GlobalHydra.instance().clear()
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.litforge_optuna.sweeper.LitforgeOptunaSweeper"
    assert cfg.hydra.sweeper.direction == "max" and cfg.hydra.sweeper.params["optimizer.lr"].startswith("tag(log")
    assert launcher.split("_")[0] in cfg.hydra.launcher._target_.lower()
    assert cfg.trainer.max_epochs == 10  # the search config's shorter trials


def _without_slurm() -> dict[str, str]:
    """PATH without the folders that hold `sbatch` or `srun`: the refusal is about a machine without SLURM, and CI's
    machine has SLURM installed (tests/test_slurm.py runs real jobs on it), so the test hides it instead of depending
    on where it runs."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return {"PATH": os.pathsep.join(d for d in folders if not any((Path(d) / t).exists() for t in ("sbatch", "srun")))}


# issue #39, "sweeps skip the checks": each was a traceback (after job 0 ran, or after Hydra made the sweep folder)
SWEEP_REFUSALS = [
    (["trainer.max_epochs=abc,2"], "trainer.max_epochs='abc': expected an integer >= 1, -1 or null", None),
    (["hydra/launcher=slurm", "seed=1,2"], "hydra/launcher=slurm: sbatch and srun are not on PATH", _without_slurm),
    ([SEARCH, "model.dropout=interval(0.0,1.5)"], "model.dropout=1.5: expected a number in [0, 1)", None),
]


@pytest.mark.parametrize(("args", "says", "env"), SWEEP_REFUSALS, ids=["value", "no-slurm", "optuna-space"])
def test_a_sweep_that_would_fail_is_refused_before_its_first_job(args, says, env, tmp_path: Path):
    """Through the real CLI: exit 1, one `litforge: error:` line, no traceback, and nothing under the log folder (no
    sweep folder: the log folder itself is not made)."""
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *args, log_dir=log_dir, extra_args=("-m",), env=env() if env else None)
    errors = [line for line in result.output.splitlines() if "litforge: error:" in line]
    assert result.returncode == 1 and "Traceback" not in result.output, result.output[-3000:]
    assert len(errors) == 1 and says in errors[0], result.output[-3000:]
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))


def test_a_sweep_gets_the_single_runs_line_for_an_unknown_key(tmp_path: Path):
    """`-m` with a key the config lacks gave Hydra's raw "not in struct" (issue #39 names `tags`, which is becoming
    a real key: another one here)."""
    single = run_cli("train.py", "trainer.max_epoch=1", log_dir=tmp_path / "one")
    sweep = run_cli("train.py", "trainer.max_epoch=1,2", log_dir=tmp_path / "many", extra_args=("-m",))
    lines = [[line for line in r.output.splitlines() if "litforge: error:" in line] for r in (single, sweep)]
    assert sweep.returncode == 1 and "Traceback" not in sweep.output, sweep.output[-3000:]
    assert len(lines[1]) == 1 and lines[1] == lines[0] and "did you mean trainer.max_epochs=1?" in lines[1][0], lines
    assert not (tmp_path / "many").exists()


@pytest.mark.slow
def test_optuna_sweep_resumes_records_failures_runs_parallel_and_writes_best(tmp_path: Path):
    """One interrupted study, resumed with 2 trials in parallel (joblib), one of which fails.

    The study is prepared as an interrupted sweep leaves it: one trial still RUNNING. Two trials are enqueued so the
    outcome does not depend on the sampler: dropout 0.1, and 1.5 from outside the searched interval (as a study
    shared with another tool may hold; the space itself passed the sweep's check, which refuses a space reaching
    1.5), which the trial's own check refuses: the trial must FAIL.
    """
    import optuna
    from optuna.trial import TrialState

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    storage = f"sqlite:///{sweep_dir}/optuna.db"
    study = optuna.create_study(study_name="digits_optuna", storage=storage, direction="maximize")
    study.ask()  # left RUNNING, as by a killed sweep
    study.enqueue_trial({"model.dropout": 1.5})
    study.enqueue_trial({"model.dropout": 0.1})

    result = run_cli(
        "train.py",
        *TINY,
        SEARCH,
        "model.dropout=interval(0.0,0.5)",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.n_jobs=2",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep_dir}",
        log_dir=tmp_path / "logs",
        extra_args=("-m",),
    )
    assert result.returncode == 0, result.output[-4000:]
    assert "Trial 0 was left running" in result.output

    trials = optuna.load_study(study_name="digits_optuna", storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].params["model.dropout"] == 1.5 and "dropout" in trials[1].user_attrs["error"]
    assert 0.0 < trials[2].value <= 1.0
    # job folder N is trial N; the completed trial's value is its run's objective
    metrics = yaml.safe_load((sweep_dir / "2" / "metrics.json").read_text())
    assert metrics["objective"]["value"] == pytest.approx(trials[2].value)
    assert not (sweep_dir / "1" / "metrics.json").exists()

    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert best["trials"] == {"complete": 1, "fail": 2, "pruned": 0}
    assert best["metric"] == "val/acc" and best["direction"] == "maximize"
    assert best["best"]["trial"] == 2 and best["best"]["value"] == pytest.approx(trials[2].value)
    assert best["best"]["params"] == trials[2].params
    assert "model.dropout=0.1" in best["best"]["command"]
    summary = (sweep_dir / "summary.csv").read_text()
    assert "FAILED" in summary and "COMPLETED" in summary


def _fake_run(folder: Path, overrides: list[str], acc: float | None, loss: float = 1.0) -> None:
    """A run folder as train.py leaves it: .hydra/overrides.yaml, metrics.json (none when the job failed)."""
    import json

    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if acc is not None:
        (folder / "metrics.json").write_text(
            json.dumps(
                {
                    "metrics": {"test/acc": acc, "test/loss": loss},
                    "objective": {"metric": "test/acc", "mode": "max", "value": acc},
                }
            )
        )


def test_aggregate_reports_mean_and_std_over_seeds_per_configuration(tmp_path: Path):
    import csv
    import subprocess
    import sys

    runs = tmp_path / "runs"
    for i, (lr, seed, acc) in enumerate(
        [("0.01", 1, 0.90), ("0.01", 2, 0.94), ("0.01", 3, 0.92), ("0.1", 1, 0.50), ("0.1", 2, 0.70), ("0.1", 3, None)]
    ):
        _fake_run(runs / f"r{i}", [f"optimizer.lr={lr}", f"seed={seed}", f"paths.log_dir=/x{i}"], acc)

    proc = subprocess.run(
        [sys.executable, "-m", "litforge.records.aggregate", str(runs)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "0.9200 ± 0.0200" in proc.stdout and "0.6000 ± 0.1414" in proc.stdout
    rows = list(csv.DictReader((runs / "aggregate.csv").open()))
    assert [r["configuration"] for r in rows] == ["optimizer.lr=0.01", "optimizer.lr=0.1"], "best mean first"
    assert rows[0]["runs"] == "3" and rows[0]["seeds"] == "1 2 3" and rows[0]["failed"] == "0"
    assert rows[1]["runs"] == "2" and rows[1]["failed"] == "1"
    assert float(rows[0]["test/acc_mean"]) == pytest.approx(0.92)
    assert float(rows[1]["test/acc_std"]) == pytest.approx(0.141421, abs=1e-5)
    assert "| optimizer.lr=0.01 | 3 | 0 | 1 2 3 | 0.9200 ± 0.0200 |" in (runs / "aggregate.md").read_text()

    empty = subprocess.run(
        [sys.executable, "-m", "litforge.records.aggregate", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert empty.returncode != 0 and "does not exist" in empty.stderr


def test_aggregate_of_many_metrics_fits_80_columns(tmp_path: Path):
    """Sixteen columns (a default run's metrics) were squeezed into 80 characters, names cut to a letter or two: a
    wide table is printed as several, each led by the configuration, every name and value whole."""
    import json
    import subprocess
    import sys

    names = ["lr-AdamW", "perf/flops_per_sec", "perf/mfu", "test/acc", "test/loss", "time/epoch_s"]
    names += ["time/train_samples_per_s", "train/acc", "train/loss", "val/acc", "val/loss", "val/f1"]
    for i, (model, lr) in enumerate([("mlp", "0.01"), ("cnn", "0.01"), ("mlp", "0.001")]):
        _fake_run(tmp_path / f"r{i}", [f"model={model}", f"optimizer.lr={lr}"], 0.5 + i / 10)
        record = {"metrics": {n: 1234.5 + i for n in names}, "objective": {"metric": "val/acc", "mode": "max"}}
        (tmp_path / f"r{i}" / "metrics.json").write_text(json.dumps(record))
    proc = subprocess.run(
        [sys.executable, "-m", "litforge.records.aggregate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\nwritten:\n")[0]  # the file paths after it are whole, however long
    assert max(map(len, table.splitlines())) <= 80, table
    assert all(name in table for name in names) and table.count("model=cnn optimizer.lr=0.01") >= 3, table
    assert "1236.5000 ± 0.0000" in table, table


def test_a_sweep_names_each_job_whose_data_is_absent_before_its_first_job(tmp_path: Path, capsys):
    """`-m 'experiment=glob(*)'` offline: the jobs whose datasets must be downloaded ended, mid-sweep, in Hydra's
    traceback. The sweep's check (before Hydra starts job 0) says so in one line per job; it writes nothing."""
    from litforge.cli.preflight import check_sweep

    data = tmp_path / "data"
    args = ["experiment=cifar10_resnet,digits_cnn", f"paths.data_dir={data}", f"paths.log_dir={tmp_path}"]
    check_sweep(CONF, "train", args)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("litforge: note:")]
    assert notes == [
        f"litforge: note: the sweep's job experiment=cifar10_resnet: CIFAR-10 is not in {data}/cifar-10-batches-py: "
        "the job downloads it first (needs internet)"
    ], notes  # digits ships with scikit-learn: no line
    assert not list(tmp_path.iterdir()), "the check downloads nothing and makes no folder"
