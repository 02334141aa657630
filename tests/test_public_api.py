"""The public API: the names user code imports from `litforge`, pinned, and the old module names still importing.

A name added here is a promise to every user's project; a name removed or renamed breaks them. Change PUBLIC only
together with docs/api.md, and keep a moved name importing (with a DeprecationWarning) for a release.
"""

from __future__ import annotations

import subprocess
import sys

import litforge

PUBLIC = [
    "ArraySplits",
    "Callback",
    "CheckpointError",
    "ClassificationTask",
    "ComparesOutputs",
    "ConfigError",
    "Count",
    "DataError",
    "DataModule",
    "DecidingTask",
    "DeclaresInputs",
    "ExampleInput",
    "ExportTask",
    "GenerateTask",
    "HasNet",
    "HeldOut",
    "ImageDataModule",
    "ImageExportData",
    "ImageInputs",
    "InMemoryLoader",
    "InMemorySplits",
    "InputReader",
    "LitforgeError",
    "LitforgeTask",
    "Model",
    "NonNegative",
    "NonNegativeInt",
    "PREDICTION_KEYS",
    "PipelineModel",
    "Positive",
    "PredictTask",
    "RegressionTask",
    "SHAPE_FACTS",
    "Seed",
    "SplitDataModule",
    "StatefulLoader",
    "SteppableTask",
    "Table",
    "TabularDataModule",
    "Task",
    "TensorParallelModel",
    "TrainingStopped",
    "UnitInterval",
    "WritesPredictions",
    "build_loss",
    "build_net",
    "evaluate",
    "export",
    "fold_indices",
    "generate",
    "input_keywords",
    "load_for_inference",
    "predict",
    "prepare",
    "read_table",
    "split_indices",
    "train",
]


def fresh(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter: what a user's first import sees (nothing imported or warned before)."""
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_public_names_are_pinned_and_each_resolves():
    assert litforge.__all__ == PUBLIC, "the public API changed: update PUBLIC and docs/api.md together"
    for name in PUBLIC:
        assert getattr(litforge, name) is not None, name
    assert dir(litforge) == sorted([*PUBLIC, "__version__"])  # not its own imports (sys, warnings, Any)


def test_the_contract_kit_is_the_public_testing_module():
    """litforge.testing is the other public module (docs/api.md): the functions a project's tests call."""
    import litforge.testing

    assert litforge.testing.__all__ == [
        "check_all",
        "check_checkpoint_round_trip",
        "check_ddp_matches_single_process",
        "check_describe_sizes_net",
        "check_export_contract",
        "check_one_step_trains",
        "check_predict_contract",
        "check_resume_mid_epoch_exact",
        "compose",
    ]


def test_a_renamed_public_name_still_resolves_with_a_warning_naming_the_new_one(monkeypatch):
    import pytest

    monkeypatch.setitem(litforge.MOVED_NAMES, "DataProblem", "DataError")
    with pytest.warns(DeprecationWarning, match="litforge.DataProblem was renamed: use litforge.DataError"):
        assert litforge.DataProblem is litforge.DataError


def test_importing_litforge_imports_no_torch():
    result = fresh("import sys, litforge; print('torch' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_an_old_module_name_still_imports_and_warns_with_its_new_home():
    """litforge.errors was the home of DataError before the packages: a project written then keeps loading."""
    ok = fresh("from litforge.errors import DataError; import litforge; print(DataError is litforge.DataError)")
    assert ok.returncode == 0 and ok.stdout.strip() == "True", ok.stderr
    assert "DeprecationWarning: litforge.errors has moved" in ok.stderr
    assert "litforge.core.errors" in ok.stderr  # the new place is named
    refused = fresh("from litforge.errors import DataError", "-W", "error::DeprecationWarning")
    assert refused.returncode != 0 and "litforge.errors has moved" in refused.stderr


def test_every_moved_module_imports_as_its_new_home():
    """In this process (the worker has imported most new homes already; a fresh interpreter importing all of them
    cost 6 s of CPU): the finder is the same one a fresh `import litforge` installs, the test above runs it fresh."""
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        moved = [
            old
            for old, new in litforge.MOVED_MODULES.items()
            if importlib.import_module(old) is not importlib.import_module(new)
            and not any(path.startswith(f"{old}.") for path in litforge.MOVED_FROM)  # split: names from their homes
        ]
    assert not moved and len(litforge.MOVED_MODULES) >= 20, moved


# what the released docs/extending.md (and the reliability page) taught a project to import, and where each lives now
TAUGHT = {
    "litforge.data.base.split_indices": "from litforge import split_indices",
    "litforge.data.loader.InMemoryLoader": "import its names from litforge",
    "litforge.models.factory.build_net": "import its names from litforge",
    "litforge.tasks.base.LitforgeTask": "import its names from litforge",
    "litforge.tasks.base.build_loss": "import its names from litforge",
    "litforge.builders.build_trainer": "from litforge.runtime.devices import build_trainer",
    "litforge.builders.build_strategy": "from litforge.parallel.fit_trainer import build_strategy",
}


def test_every_path_a_released_guide_taught_imports_with_a_warning_naming_its_home(monkeypatch):
    """A project written from last month's guide keeps importing: the same object, and a DeprecationWarning that
    names where to import it from now (an import that would break without notice is one that never warned)."""
    import sys

    import pytest

    from litforge.parallel.fit_trainer import build_strategy
    from litforge.runtime.devices import build_trainer

    homes = {"build_trainer": build_trainer, "build_strategy": build_strategy}
    for path, home in TAUGHT.items():
        module, name = path.rsplit(".", 1)
        monkeypatch.delitem(sys.modules, module, raising=False)  # a moved module warns on its first import
        found: dict[str, object] = {}
        with pytest.warns(DeprecationWarning, match=home) as warned:  # the statement as the guide wrote it
            exec(compile(f"from {module} import {name}", __file__, "exec"), found)
        value = found[name]
        assert value is (homes[name] if name in homes else getattr(litforge, name)), path
        assert all(w.filename == __file__ for w in warned), [(w.filename, str(w.message)) for w in warned]
