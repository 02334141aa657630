"""A user's own project (made by `litforge new`): found from the working folder, put before litforge's configs.

A project is a folder whose `pyproject.toml` has a `[tool.litforge]` table; `litforge <job>` run in it, or in any
folder below it, finds it by walking up. The table says

    [tool.litforge]
    conf = "conf"                   # the project's config folder (default: conf), searched before litforge's
    trusted_packages = ["demo"]     # eval/predict/export/generate may rebuild these packages' classes from a file
    [tool.litforge.configs]
    train = "demo"                  # `litforge train` composes conf/demo.yaml, which starts from litforge's train

and becomes the Hydra flags a user typed by hand before (`--config-dir <conf> --config-name <top>`) plus
`trusted_packages=[...]` for the jobs that read checkpoints, each left out where the command line already has it.
Why a table rather than a project top config named `train.yaml`: a config folder searched first would shadow
litforge's `train.yaml`, so the project's top config needs a name of its own, and something has to say which.
Read with the standard library's tomllib: no import of torch or Hydra, so `--help` stays fast.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from litforge.core.errors import ConfigError

# the jobs whose config has `trusted_packages` (they rebuild a task from a checkpoint)
READS_CHECKPOINTS = ("eval", "predict", "export", "generate")
_DIR_FLAGS = ("--config-dir", "-cd")
_NAME_FLAGS = ("--config-name", "-cn")


@dataclass(frozen=True)
class Project:
    """What `[tool.litforge]` says, with its paths made absolute."""

    root: Path
    conf_dir: Path
    configs: dict[str, str] = field(default_factory=dict)  # job -> the project's top config for it
    trusted_packages: list[str] = field(default_factory=list)

    def top_config(self, job: str) -> str:
        """The config `litforge <job>` composes: the project's own for the job, else litforge's `<job>.yaml`."""
        return self.configs.get(job, job)

    def arguments(self, job: str, args: list[str]) -> list[str]:
        """`args` with the project's flags in front (and its trusted packages), as if typed; typed ones win."""
        typed = {a.split("=", 1)[0] for a in args}
        added: list[str] = []
        if not typed & set(_DIR_FLAGS):
            added += ["--config-dir", str(self.conf_dir)]
        if job in self.configs and not typed & set(_NAME_FLAGS):
            added += ["--config-name", self.configs[job]]
        if job in READS_CHECKPOINTS and self.trusted_packages and "trusted_packages" not in typed:
            added.append(f"trusted_packages=[{','.join(self.trusted_packages)}]")
        return [*added, *args]


def find_project(start: Path | None = None) -> Project | None:
    """The project holding `start` (default: the working folder), or None outside any."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            table = _litforge_table(pyproject)
            if table is not None:
                return read_project(candidate, table)
    return None


def _litforge_table(pyproject: Path) -> dict[str, object] | None:
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: not readable as TOML ({exc}): fix the file") from None
    table = data.get("tool", {}).get("litforge")
    return table if isinstance(table, dict) else None


def read_project(root: Path, table: dict[str, object]) -> Project:
    """Check the table: each mistake is one line naming the key in pyproject.toml."""
    where = root / "pyproject.toml"
    conf_dir = root / str(table.get("conf", "conf"))
    if not conf_dir.is_dir():
        raise ConfigError(f"{where}: [tool.litforge] conf={conf_dir.name!r} is not a folder: create it, or set conf")
    configs = table.get("configs", {})
    if not isinstance(configs, dict):
        raise ConfigError(f"{where}: [tool.litforge.configs] must be a table of job = config name, e.g. train = 'demo'")
    for job, name in configs.items():
        if not (conf_dir / f"{name}.yaml").is_file():
            raise ConfigError(
                f"{where}: [tool.litforge.configs] {job} = {name!r}: there is no {conf_dir / f'{name}.yaml'}"
            )
        if name == job:
            raise ConfigError(
                f"{where}: [tool.litforge.configs] {job} = {name!r} would hide litforge's own {job}.yaml, which it "
                f"starts from: give it a name of its own, e.g. {root.name}"
            )
    trusted = table.get("trusted_packages", [])
    if not isinstance(trusted, list) or not all(isinstance(p, str) for p in trusted):
        raise ConfigError(f"{where}: [tool.litforge] trusted_packages must be a list of package names, e.g. ['demo']")
    return Project(root, conf_dir, {str(k): str(v) for k, v in configs.items()}, list(trusted))
