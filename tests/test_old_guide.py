"""A user's project survives an upgrade: tests/projects/old_guide is the previous docs/extending.md's project, as
that page wrote it, run the way it said (`python train.py "hydra.searchpath=[file://.../myproject/conf]"
experiment=diabetes data.path=diabetes.csv`), then eval, predict and export on its checkpoint. Its options named like
litforge's later built-ins (`data=csv`, `task=regression`, `loss=mse`) are the ones used, and the start line says so;
the module paths it imports keep importing, each with a DeprecationWarning naming the public home. The same
shadowing through a project's `[tool.litforge] conf` (the other way in) is the second test.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

from conftest import CONF, ROOT, TINY, _CliServer, read_metrics, single_run

PROJECT = ROOT / "tests" / "projects" / "old_guide"
TAUGHT = {  # the module paths its files import -> the public home each warning names
    "litforge.data.base.split_indices": "from litforge import split_indices",
    "litforge.data.loader": "import its names from litforge",
    "litforge.models.factory": "import its names from litforge",
    "litforge.tasks.base": "import its names from litforge",
    "litforge.errors": "import its names from litforge",
}


def cli(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`python <clone>/<script> args` run in `cwd` (the warm CLI server's fork); (exit code, stdout + stderr)."""
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    result = _CliServer.get().run([str(ROOT / script), *args], cwd=cwd, env=full, timeout=240)
    return result.returncode, result.output


def write_diabetes_csv(path: Path, rows: int = 120) -> None:
    """myproject/diabetes_csv.py of the guide, on the first `rows` patients (a cheap run)."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*data.feature_names, "progression"])
        pairs = list(zip(data.data.tolist(), data.target.tolist(), strict=True))[:rows]
        writer.writerows([*row, target] for row, target in pairs)


def test_the_previous_guides_imports_still_work_and_warn_with_the_public_home(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT))
    for name in [m for m in sys.modules if m.startswith("myproject")] + [p for p in TAUGHT if p.count(".") < 3]:
        monkeypatch.delitem(sys.modules, name, raising=False)  # first imports: a moved module warns on its first
    try:
        with pytest.warns(DeprecationWarning) as warned:
            import myproject.data  # noqa: F401
            import myproject.tasks  # noqa: F401
    finally:  # another test's `myproject` (tests/test_extending.py writes one) must import its own package
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]
    messages = [str(w.message) for w in warned]
    for path, home in TAUGHT.items():
        assert any(m.startswith(f"{path}") and home in m for m in messages), (path, messages)


@pytest.mark.slow
def test_a_project_from_the_previous_guide_trains_evaluates_predicts_and_exports(tmp_path: Path):
    write_diabetes_csv(tmp_path / "diabetes.csv")
    env = {"PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}
    logs = f"paths.log_dir={tmp_path / 'logs'}"
    conf = PROJECT / "myproject" / "conf"
    tiny = [a for a in TINY if not a.startswith("callbacks.tensorboard_extras")] + ["trainer.max_epochs=1"]
    code, out = cli("train.py", logs, f"hydra.searchpath=[file://{conf}]", "experiment=diabetes",
                    "data.path=diabetes.csv", *tiny, cwd=tmp_path, env=env)  # fmt: skip
    assert code == 0, out[-3000:]
    for group, option in (("data", "csv"), ("task", "regression"), ("loss", "mse")):  # theirs, and said so
        assert f"{group}={option}: your {conf / group / option}.yaml (shadows litforge's)\n" in out, out[:3000]
    metrics = read_metrics(single_run(tmp_path / "logs", "diabetes"))
    assert "test/mae" in metrics["metrics"] and "test/r2" not in metrics["metrics"], metrics  # its task, not ours
    best = metrics["best_checkpoint"]
    trusted = "trusted_packages=[myproject]"

    code, out = cli("eval.py", logs, f"ckpt_path={best}", trusted, cwd=tmp_path, env=env)
    assert code == 0 and "test/mae" in out, out[-3000:]
    code, out = cli("predict.py", logs, f"ckpt_path={best}", trusted, cwd=tmp_path, env=env)  # no predict_step
    assert code == 0, out[-3000:]
    (predictions,) = (tmp_path / "logs" / "predict").rglob("predictions.csv")
    assert len(predictions.read_text().splitlines()) == 1 + round(120 * 0.2)  # a header and the test rows
    code, out = cli("export.py", logs, f"ckpt_path={best}", trusted, "quantize=[]", cwd=tmp_path, env=env)
    assert code == 0 and any(line.endswith("model.onnx") for line in out.splitlines()), out[-3000:]


@pytest.mark.slow
def test_a_projects_own_option_shadows_litforges_through_its_conf_folder(tmp_path: Path):
    """`[tool.litforge] conf`: the project's conf/task/regression.yaml (litforge's, ranked by val/mae instead of
    val/r2) is the one a run uses, and the start line says whose it is."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n\n[tool.litforge]\nconf = "conf"\n')
    (tmp_path / "conf" / "task").mkdir(parents=True)
    text = (CONF / "task" / "regression.yaml").read_text()
    (tmp_path / "conf" / "task" / "regression.yaml").write_text(
        text.replace("metric: val/r2", "metric: val/mae").replace("mode: max", "mode: min")
    )
    code, out = cli("train.py", f"paths.log_dir={tmp_path / 'logs'}", "experiment=diabetes_regression",
                    "trainer.max_epochs=1", *TINY[1:], cwd=tmp_path)  # fmt: skip
    assert code == 0, out[-3000:]
    assert "task=regression: your conf/task/regression.yaml (shadows litforge's)\n" in out, out[:3000]
    metrics = read_metrics(single_run(tmp_path / "logs", "diabetes_regression"))
    assert metrics["objective"]["metric"] == "val/mae", metrics
