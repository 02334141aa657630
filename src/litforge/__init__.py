"""litforge: a PyTorch Lightning + Hydra training template, and a library a project of its own builds on.

The public API is this module: what user code imports, it imports from `litforge` (`from litforge import DataError,
Count, LitforgeTask`), and these names do not move under it. Everything under `litforge.<package>` is internal and
may move between releases; a module that moved keeps importing for a release, with a DeprecationWarning that names
its new home (:data:`MOVED_MODULES`). docs/api.md lists the names by what they are for; tests/test_public_api.py
pins them.

Importing the package is cheap on purpose (no torch): each name below is imported on first use (PEP 562), so
`litforge --help` and config composition stay fast.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__version__ = "0.2.0"

#: public name -> the module that defines it (its home), grouped as docs/api.md lists them; read by the config
#: check to follow a user's `from litforge import X` to X's source without importing it
HOMES: dict[str, str] = {
    # errors: a user mistake raises one of these, and the command line prints its message as one line
    "LitforgeError": "litforge.core.errors",
    "ConfigError": "litforge.core.errors",
    "DataError": "litforge.core.errors",
    "CheckpointError": "litforge.core.errors",
    "TrainingStopped": "litforge.core.errors",
    # argument bounds: annotations a constructor's arguments take, checked before a run starts
    "Count": "litforge.core.bounds",
    "NonNegativeInt": "litforge.core.bounds",
    "Seed": "litforge.core.bounds",
    "HeldOut": "litforge.core.bounds",
    "UnitInterval": "litforge.core.bounds",
    "Positive": "litforge.core.bounds",
    "NonNegative": "litforge.core.bounds",
    # contracts: what a datamodule, task, net or callback offers for the jobs to put it together
    "DataModule": "litforge.core.contracts",
    "StatefulLoader": "litforge.core.contracts",
    "Task": "litforge.core.contracts",
    "SteppableTask": "litforge.core.contracts",
    "Model": "litforge.core.contracts",
    "TensorParallelModel": "litforge.core.contracts",
    "PipelineModel": "litforge.core.contracts",
    "Callback": "litforge.core.contracts",
    "SHAPE_FACTS": "litforge.core.contracts",
    "HasNet": "litforge.core.contracts",
    "DecidingTask": "litforge.core.contracts",
    # ... what predict and export need (checked when those jobs start)
    "PredictTask": "litforge.core.contracts",
    "WritesPredictions": "litforge.core.contracts",
    "DeclaresInputs": "litforge.core.contracts",
    "ExampleInput": "litforge.core.contracts",
    "ComparesOutputs": "litforge.core.contracts",
    "PREDICTION_KEYS": "litforge.core.contracts",
    "InputReader": "litforge.core.contracts",
    "ImageInputs": "litforge.core.contracts",
    "ArraySplits": "litforge.core.contracts",
    "ExportTask": "litforge.core.contracts",
    "ImageExportData": "litforge.core.contracts",
    "GenerateTask": "litforge.core.contracts",
    # data: loaders, splits and tables for a datamodule of one's own
    "InMemoryLoader": "litforge.data.memory",
    "split_indices": "litforge.data.memory",
    "fold_indices": "litforge.data.base",
    "SplitDataModule": "litforge.data.base",
    "InMemorySplits": "litforge.data.base",
    "ImageDataModule": "litforge.data.base",
    "read_table": "litforge.data.tables",
    "Table": "litforge.data.tables",
    "TabularDataModule": "litforge.data.tabular",
    # tasks and nets
    "LitforgeTask": "litforge.tasks.task",
    "ClassificationTask": "litforge.tasks.classification",
    "RegressionTask": "litforge.tasks.regression",
    "build_loss": "litforge.tasks.task",
    "build_net": "litforge.models.nets",
    "input_keywords": "litforge.models.nets",
    # jobs: plain functions of a composed config (what `litforge <job>` runs), and a checkpoint for inference
    "train": "litforge.jobs.train",
    "evaluate": "litforge.jobs.eval",
    "predict": "litforge.jobs.predict",
    "export": "litforge.jobs.export",
    "generate": "litforge.jobs.generate",
    "prepare": "litforge.jobs.prepare",
    "load_for_inference": "litforge.tasks.restore",
}

__all__ = sorted(HOMES)


#: public names renamed since the last release: old name -> its new name, which `litforge.<old>` still returns for a
#: release, with a DeprecationWarning (docs/api.md, "What public promises"). Empty: nothing has been renamed yet.
MOVED_NAMES: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    if name in MOVED_NAMES:
        warnings.warn(
            f"litforge.{name} was renamed: use litforge.{MOVED_NAMES[name]}", DeprecationWarning, stacklevel=2
        )
        return __getattr__(MOVED_NAMES[name])
    module = HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'litforge' has no attribute {name!r}")
    value = _imported(module, name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:  # the public names, not this module's own imports (sys, warnings, Any)
    return [*__all__, "__version__"]


# ---- modules that moved: the old import keeps working for a release, with a DeprecationWarning --------------------
#: old module -> its new home. The top-level modules of litforge 0.1 before the packages (`litforge.errors`,
#: `litforge.contracts`, ...); user code should import from `litforge` itself.
MOVED_MODULES: dict[str, str] = {
    "litforge.errors": "litforge.core.errors",
    "litforge.contracts": "litforge.core.contracts",
    "litforge.losses": "litforge.tasks.losses",
    "litforge.schedulers": "litforge.tasks.schedulers",
    "litforge.builders": "litforge.jobs.build",
    "litforge.checkpoints": "litforge.checkpointing.load",
    "litforge.checkpoint_io": "litforge.checkpointing.io",
    "litforge.restore": "litforge.tasks.restore",
    "litforge.resume": "litforge.checkpointing.resume",
    "litforge.folders": "litforge.checkpointing.folders",
    "litforge.durations": "litforge.runtime.durations",
    "litforge.instantiate": "litforge.core.instantiate",
    "litforge.validation": "litforge.config.check",
    "litforge.config.durations": "litforge.runtime.durations",
    "litforge.config.instantiate": "litforge.core.instantiate",
    "litforge.config.override_text": "litforge.runtime.override_text",
    "litforge.config.validation": "litforge.config.check",
    "litforge.compat": "litforge.runtime.compat",
    "litforge.host_reads": "litforge.runtime.host_reads",
    "litforge.watchdog": "litforge.runtime.watchdog",
    "litforge.aggregate": "litforge.records.aggregate",
    "litforge.metrics": "litforge.records.metrics",
    "litforge.optuna_study": "litforge.records.optuna_study",
    "litforge.provenance": "litforge.records.provenance",
    "litforge.sweeps": "litforge.records.sweeps",
    "litforge.tracking": "litforge.records.tracking",
    "litforge.latency": "litforge.deploy.latency",
    "litforge.speed": "litforge.models.speed",
    "litforge.help": "litforge.cli.help",
    "litforge.preflight": "litforge.cli.preflight",
    "litforge.tuning": "litforge.jobs.tuning",
    "litforge.checkpointing.restore": "litforge.tasks.restore",
    "litforge.parallel.consolidate": "litforge.checkpointing.consolidate",
    # the modules docs/extending.md taught before its imports came from `litforge` (each name is in HOMES now)
    "litforge.data.loader": "litforge.data.memory",
    "litforge.models.factory": "litforge.models.nets",
    "litforge.tasks.base": "litforge.tasks.task",
}

#: a name a guide taught from a module that still exists (or from one of MOVED_MODULES) and that lives elsewhere now:
#: "old.module.name" -> its module now. It keeps importing for a release, with a DeprecationWarning naming its public
#: home (`from litforge import X` where HOMES has X, else its module).
MOVED_FROM: dict[str, str] = {
    "litforge.data.base.split_indices": "litforge.data.memory",
    "litforge.builders.build_trainer": "litforge.runtime.devices",
    "litforge.builders.build_strategy": "litforge.parallel.fit_trainer",
}


def moved_attribute(module: str, name: str, rest: str | None = None) -> object:
    """`module.name` from its new module (MOVED_FROM; else `rest`, the module of the others), with a DeprecationWarning
    naming where to import it from: the `__getattr__` of a module some of whose names moved out."""
    new = MOVED_FROM.get(f"{module}.{name}", rest)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    home = f"from litforge import {name}" if name in HOMES else f"from {new} import {name}"
    warnings.warn(f"{module}.{name} has moved: {home}", DeprecationWarning, stacklevel=3)  # 3: the importing line
    return _imported(new, name)


def _imported(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


class _OldModule(ModuleType):
    """A module of MOVED_MODULES some of whose names moved elsewhere (MOVED_FROM): each name from its own new home."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # the import system's probes (`__path__`): not a name a user imports
            raise AttributeError(name)
        return moved_attribute(self.__name__, name, MOVED_MODULES[self.__name__])


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as its new module, once, with a DeprecationWarning naming where it lives now.

    An import hook and not a file per old name: the old names need no module files at the top of the package, whose
    only module is this one (docs/architecture: a reader finds a module by its package)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if any(old.startswith(f"{spec.name}.") for old in MOVED_FROM):
            return _OldModule(spec.name)  # split between homes: each name warns with its own
        new = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} has moved: import its names from litforge (the public API); the module is now {new}",
            DeprecationWarning,
            stacklevel=2,  # warnings skips the import machinery's frames: 2 is the importing line
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module is already imported."""


if not any(isinstance(finder, _MovedModule) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModule())
