"""`compose(...)`: the config `litforge train` composes, in a test, without a command line.

Hydra's compose API with the same search path as the command: the project's `conf/` first (its top config and
options), litforge's own configs after it (its groups and defaults), through Hydra's `hydra.searchpath`. A project
folder without a top config of its own (`train.yaml`) adds its options to litforge's top config instead. An installed
litforge whose SearchPathPlugin already puts its configs on every search path needs nothing more; the entry added
here is then a second, harmless copy of the same folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

import litforge.runtime.ranks  # noqa: F401  (registers the resolvers the configs use, ${uid:})
from litforge.cli.main import CONF_DIR
from litforge.cli.project import find_project


def litforge_conf_dir() -> Path:
    """The folder of litforge's own configs (`conf/` of a clone; the copy an installed package carries)."""
    return Path(CONF_DIR)


def compose(
    overrides: Sequence[str] = (), config_name: str = "train", config_dir: str | Path | None = None
) -> DictConfig:
    """The composed config of `config_name` with `overrides`, as `litforge <job> overrides...` would compose it in
    the project whose configs are in `config_dir` (None: the project the working folder is in, found by its
    `[tool.litforge]` table as the command finds it; outside any, litforge's own, as `python train.py` in a clone).

    Nothing runs: no run folder, no Hydra job. `paths.output_dir` is left as Hydra's interpolation; the checks set it
    to the tmp_path they are given.
    """
    own = litforge_conf_dir()
    # a project of the user's (`[tool.litforge]` in its pyproject.toml, found from config_dir or the working folder,
    # as `litforge <job>` finds it): its conf/ and its top config for the job
    found = find_project(Path(config_dir).resolve() if config_dir is not None else None)
    if found is not None and (config_dir is None or Path(config_dir).resolve() == found.conf_dir.resolve()):
        config_dir, config_name = found.conf_dir, found.top_config(config_name)
    project = Path(config_dir).resolve() if config_dir is not None else own
    if not project.is_dir():
        raise AssertionError(f"config_dir={config_dir}: no such folder (the project's conf/)")
    # Hydra reads the top config from the primary folder before it reads `hydra.searchpath`: a project without a
    # `<config_name>.yaml` of its own composes litforge's, with the project's options on the search path
    primary, added = (project, own) if (project / f"{config_name}.yaml").is_file() else (own, project)
    extra = [] if project == own else [f"hydra.searchpath=[file://{added}]"]
    GlobalHydra.instance().clear()  # a test may have left an initialised Hydra behind
    try:
        with initialize_config_dir(config_dir=str(primary), version_base="1.3"):
            return hydra_compose(config_name=config_name, overrides=[*extra, *overrides])
    finally:
        GlobalHydra.instance().clear()
