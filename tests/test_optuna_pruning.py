"""Optuna pruning in litforge's sweeper (hydra.sweeper.pruner): a hopeless trial is stopped and marked PRUNED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import TINY, run_cli

SEARCH = "hparams_search=digits_optuna"
# every searched parameter but the learning rate fixed, so the trials differ only in lr
FIXED = ["optimizer.weight_decay=0.0", "model.hidden_dims=[64]", "model.dropout=0.0", "data.batch_size=64"]
MAX_EPOCHS = 2


@pytest.mark.slow
def test_median_pruner_stops_a_hopeless_trial_early_and_the_summary_ranks_only_completed_ones(tmp_path: Path):
    """Trials 0-1 (lr 0.05) complete and start the pruner; trial 2 (lr 1e-7, enqueued as Hydra prints it, 1e-07: no
    sampler luck) scores below their median at its first validation, so it is pruned after 1 of 2 epochs, its run folder
    kept."""
    import optuna
    from optuna.trial import TrialState

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    storage = f"sqlite:///{sweep_dir}/optuna.db"
    study = optuna.create_study(study_name="digits_optuna", storage=storage, direction="maximize")
    for lr in ("0.05", "0.05", "1e-07"):
        study.enqueue_trial({"optimizer.lr": lr})

    tiny = [o for o in TINY if not o.startswith(("trainer.max_epochs=", "trainer.limit_train_batches="))]
    result = run_cli(
        "train.py",
        *tiny,
        SEARCH,
        *FIXED,
        f"trainer.max_epochs={MAX_EPOCHS}",
        "trainer.limit_train_batches=2",
        "optimizer.lr=choice(0.05,1e-7)",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.pruner=median",
        "hydra.sweeper.pruner_args={n_startup_trials:2,n_warmup_steps:0}",
        f"hydra.sweep.dir={sweep_dir}",
        log_dir=tmp_path / "logs",
        extra_args=("-m",),
    )
    assert result.returncode == 0, result.output[-4000:]
    assert "3 trials: 2 complete, 1 pruned, 0 failed" in result.output

    trials = optuna.load_study(study_name="digits_optuna", storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert sorted(trials[0].intermediate_values) == list(range(MAX_EPOCHS)), "a trial reports every validation"
    assert sorted(trials[2].intermediate_values) == [0], "the pruned trial stopped after its first validation"

    # the pruned run's folder stays, with the epoch it stopped at; the summary marks it and ranks it last
    record = json.loads((sweep_dir / "2" / "result.json").read_text())
    assert record["status"] == "PRUNED" and record["pruned_after_validations"] == 1
    import torch

    last_ckpt = torch.load(sweep_dir / "2" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last_ckpt["epoch"] < MAX_EPOCHS - 1, "the pruned run's last checkpoint is from before its final epoch"
    summary = (sweep_dir / "summary.csv").read_text().splitlines()
    assert summary[-1].startswith("2,PRUNED") and "optuna_pruning" not in "\n".join(summary)

    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert best["trials"] == {"complete": 2, "fail": 0, "pruned": 1}
    assert best["best"]["trial"] in (0, 1) and best["best"]["params"] == {"optimizer.lr": "0.05"}


def test_pruner_none_adds_no_callback_and_bad_pruner_settings_are_refused_in_one_line(tmp_path: Path):
    from optuna.pruners import HyperbandPruner, MedianPruner, NopPruner

    from hydra_plugins.litforge_optuna.sweeper import LitforgeOptunaSweeper
    from litforge.records.optuna_study import build_pruner

    def sweeper(pruner: str, **args) -> LitforgeOptunaSweeper:
        return LitforgeOptunaSweeper(
            direction="max",
            study_name="s",
            storage=f"sqlite:///{tmp_path}/optuna.db",
            n_trials=2,
            n_jobs=1,
            sampler={},
            params={},
            pruner=pruner,
            pruner_args=args,
        )

    assert sweeper("none")._pruning_overrides(0) == []
    assert sweeper("none", n_warmup_steps=1)._pruning_overrides(0) == [], "none ignores a search config's args"
    override = sweeper("median", n_warmup_steps=1)._pruning_overrides(4)
    assert len(override) == 1 and override[0].startswith("++callbacks.optuna_pruning=")
    assert "trial_number:4" in override[0] and f"{tmp_path}/optuna.db" in override[0]
    assert isinstance(build_pruner("none"), NopPruner) and isinstance(build_pruner("Median"), MedianPruner)
    assert isinstance(build_pruner("hyperband", {"min_resource": 1}), HyperbandPruner)

    with pytest.raises(ValueError, match=r"^hydra.sweeper.pruner='asha': use one of none, median, hyperband"):
        sweeper("asha")
    with pytest.raises(
        ValueError,
        match=r"^hydra.sweeper.pruner_args for pruner=median: .*n_warmup_step.*"
        r"MedianPruner takes: n_startup_trials, n_warmup_steps",
    ):
        sweeper("median", n_warmup_step=1)
    with pytest.raises(ValueError, match=r"^hydra.sweeper.pruner=median needs hydra.sweeper.storage"):
        LitforgeOptunaSweeper(
            direction="max", study_name="s", storage=None, n_trials=2, n_jobs=1, sampler={}, params={}, pruner="median"
        )


def test_a_pruned_job_without_its_hydra_config_is_marked_in_the_trials_own_folder(tmp_path: Path):
    """A job result that carries no Hydra config (a launcher's bare return) falls back to <sweep>/<trial number>: the
    fallback once handed OmegaConf.select a plain dict, which it cannot read (AttributeError)."""
    from types import SimpleNamespace

    from hydra_plugins.litforge_optuna.sweeper import note_pruned

    job_dir = tmp_path / "3"
    job_dir.mkdir()
    (job_dir / "result.json").write_text(json.dumps({"job": "3", "status": "COMPLETED", "overrides": []}))
    note_pruned(SimpleNamespace(number=3, last_step=0), SimpleNamespace(), tmp_path, None)
    record = json.loads((job_dir / "result.json").read_text())
    assert record["status"] == "PRUNED" and record["pruned_after_validations"] == 1
