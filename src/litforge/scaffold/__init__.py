"""`litforge new <folder>`: write a project of the user's own, which depends on litforge instead of forking it.

The files are in `template/` beside this module, shipped in the wheel: each `<path>.tmpl` is written to `<path>`
with `{{package}}`, `{{name}}` and `{{litforge_version}}` replaced (a single leading `_` of a name becomes `.`,
and `package/` and `conf/project.yaml` take the package's name), and nothing else: what a user reads in the
template is what they get.

Why a built-in generator rather than copier (the kept library for templates, whose `copier update` merges later
template changes into a generated project): `copier update` needs the template as a git repository with version
tags, reachable when the user updates, so the copy a wheel carries cannot serve it, and `litforge new` must work
offline from the installed package alone; copier would also add its own dependencies to every install of litforge
for one command. What changes in litforge reaches a project through reinstalling litforge instead: the project
imports only public names and starts its top config from litforge's (`defaults: [train, ...]`), so the generated
files are a starting point the user owns and rewrites, not a copy to keep in step (docs/extending.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import keyword
import re
import sys
from pathlib import Path

from litforge import __version__

TEMPLATE = Path(__file__).parent / "template"
SUFFIX = ".tmpl"


def package_name(folder: Path) -> str:
    """The import name for a project folder: `My-Project` → `my_project`."""
    return re.sub(r"\W", "_", folder.resolve().name.lower().replace("-", "_"))


def new_project(folder: Path) -> list[Path]:
    """Write the project into `folder` (absent or empty); returns the files written. Raises ValueError for a
    folder that cannot hold it, with the one-line reason."""
    package = package_name(folder)
    if not package.isidentifier() or keyword.iskeyword(package) or package[0].isdigit():
        raise ValueError(f"{folder}: {package!r} is not a Python package name: name the folder like my_project")
    if package in ("litforge", "hydra", "torch", "test", "tests") or package in sys.stdlib_module_names:
        raise ValueError(f"{folder}: a package named {package!r} would hide another one: pick another folder name")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder} exists and is not an empty folder: name a new one")

    requirement, origin = litforge_requirement()
    values = {"{{package}}": package, "{{name}}": folder.resolve().name, "{{litforge_version}}": __version__}
    values |= {"{{litforge_requirement}}": requirement, "{{litforge_origin}}": origin}
    written = []
    for source in sorted(TEMPLATE.rglob(f"*{SUFFIX}")):
        target = folder / _target_path(source.relative_to(TEMPLATE), package)
        text = source.read_text()
        for key, value in values.items():
            text = text.replace(key, value)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if target.parent.name == ".ci":
            target.chmod(0o755)
        written.append(target)
    return written


def litforge_requirement(direct_url: str | None = None) -> tuple[str, str]:
    """(the new project's dependency on litforge, where it comes from). The package index has no litforge yet, so
    the line names what this machine installed litforge from (pip's record, PEP 610 `direct_url.json`): a wheel or
    a folder is a direct reference that resolves in any fresh environment here; a clone (editable, or on the path)
    is named in the note instead (a direct reference would make pip reinstall it non-editable over the user's)."""
    if direct_url is None:
        direct_url = importlib.metadata.distribution("litforge").read_text("direct_url.json")
    origin = json.loads(direct_url) if direct_url else {}
    url, pinned = origin.get("url", ""), f"litforge[deploy]>={__version__}"
    editable = origin.get("dir_info", {}).get("editable", False)
    if url and not editable:
        return f"litforge[deploy] @ {url}", url.removeprefix("file://")
    clone = Path(url.removeprefix("file://")) if editable else Path(__file__).parents[3]
    if (clone / "pyproject.toml").is_file() and (clone / "src" / "litforge").is_dir():
        return pinned, f"the clone {clone}: pip install -e {clone} first"
    return pinned, "the package index"


def _target_path(relative: Path, package: str) -> Path:
    parts = [
        package if p == "package" else "." + p[1:] if p.startswith("_") and not p.startswith("__") else p
        for p in relative.parts
    ]
    parts[-1] = parts[-1].removesuffix(SUFFIX)
    if parts == ["conf", "project.yaml"]:
        parts[-1] = f"{package}.yaml"
    return Path(*parts)


def new_command(args: list[str]) -> int:
    """`litforge new <folder>`: the exit code."""
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: litforge new <folder>    write a project of your own there (docs/extending.md)", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 1
    folder = Path(args[0])
    try:
        written = new_project(folder)
    except ValueError as exc:
        print(f"litforge: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} files into {folder}/; then:\n  cd {folder}\n  pip install -e . && litforge train")
    print(f"(its pyproject.toml takes litforge from {litforge_requirement()[1]})")
    print("texts with a label or a set of labels each need no code: litforge train data=text data.path=<file.jsonl> "
          "task=multilabel model=text_pool (litforge's docs/text.md; tables: data=csv)")  # fmt: skip
    return 0
