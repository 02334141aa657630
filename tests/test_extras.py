"""A light install: integrations are extras (pyproject.toml), and a run that needs a missing one is refused before
anything is built, in one line naming the extra (litforge.runtime.extras)."""

from __future__ import annotations

import sys
import tomllib

import pytest

from conftest import CONF, ROOT
from litforge.core.errors import ConfigError
from litforge.runtime.extras import EXTRA_OF, NEEDED_BY


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_optional_module_belongs_to_an_extra_that_all_and_dev_install():
    extras = _extras()
    assert set(NEEDED_BY.values()) <= set(EXTRA_OF)
    for module, extra in EXTRA_OF.items():
        assert extra in extras, f"{module}: pyproject has no `{extra}` extra"
    assert extras["all"] == [f"litforge[{','.join(sorted(set(EXTRA_OF.values()), key=list(extras).index))}]"]
    assert "litforge[all]" in extras["dev"], "the README's `pip install -e .[dev]` must set up everything"


@pytest.mark.parametrize(
    ("overrides", "missing", "says"),
    [
        (
            ["data=cartpole", "task=dqn", "model=qnet"],
            "gymnasium",
            "data (litforge.data.gym.GymDataModule) needs gymnasium",
        ),
        (["logger=mlflow"], "mlflow", "`trackers` extra: pip install -e '.[trackers]'"),
        (["callbacks=[default,qat]"], "torchao", "`deploy` extra"),
    ],
)
def test_a_group_that_needs_a_missing_extra_is_refused_in_one_line(overrides, missing, says, compose_cfg, monkeypatch):
    from litforge.config.check import check_config

    cfg = compose_cfg("print_config=false", *overrides)
    check_config(cfg)  # installed: passes
    monkeypatch.setitem(sys.modules, missing, None)  # as if not installed: `import <missing>` fails
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("job", "args", "missing", "says"),
    [
        (
            "train",
            ["-m", "hydra/launcher=slurm", "seed=1,2"],
            "hydra_plugins.hydra_submitit_launcher",
            "`cluster` extra",
        ),
        ("train", ["-m", "hparams_search=digits_optuna"], "optuna", "hparams_search=digits_optuna needs optuna"),
        ("export", ["ckpt_path=x.ckpt"], "onnxruntime", "export.py needs onnxruntime"),
        ("prepare", ["data=digits", "output=shards"], "litdata", "`streaming` extra"),
    ],
)
def test_a_job_launcher_or_search_that_needs_a_missing_extra_is_refused(job, args, missing, says, monkeypatch, capsys):
    from litforge.cli.preflight import prepare_command_line

    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(SystemExit) as info:
        prepare_command_line(CONF, job, [f"{job}.py", *args])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("litforge: error:") == 1 and says in err, err
