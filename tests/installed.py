"""litforge's wheel installed alone into a fresh environment: what a user who installs the built wheel has.

The environment reuses the installed dependencies without copying 6 GB: a venv without pip whose one `.pth` file
names the site-packages folders of this interpreter. Python does not run the `.pth` files of a folder added that way
(an editable install of the clone among them), so `import litforge` is the wheel's copy and nothing of the clone. Its
`pip` runs offline: no index, and builds use the installed setuptools (`PIP_NO_BUILD_ISOLATION=0` turns isolation
off: pip reads that variable inverted).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(folder: Path) -> Path:
    """`pip wheel` of the clone, offline; the wheel's path. The build writes build/ and src/*.egg-info in the clone,
    so two test workers building at once take turns (a lock file in the system's temporary folder)."""
    import fcntl
    import tempfile

    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder)]
    with open(Path(tempfile.gettempdir()) / "litforge-wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run([*command, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (wheel,) = folder.glob("litforge-*.whl")
    return wheel


def fresh_environment(folder: Path, wheel: Path) -> dict[str, str]:
    """A venv at `folder` holding `wheel` (non-editable); the environment variables of a shell activated in it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    purelib = Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(folder), "platbase": str(folder)}))
    dependencies = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (purelib / "_dependencies.pth").write_text("\n".join(dependencies) + "\n")
    bin_dir = folder / "bin"
    pip = bin_dir / "pip"  # `pip` is the venv's own: the dependencies' pip run by the venv's interpreter
    pip.write_text(f'#!/bin/sh\nexec "{bin_dir / "python"}" -m pip "$@"\n')
    pip.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(folder)}
    env |= {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env |= {"PYTHONUNBUFFERED": "1"}
    result = subprocess.run(["pip", "install", "-q", "--no-deps", str(wheel)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return env


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `command`; it must succeed (its output's end is the failure message)."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} in {cwd}:\n{(result.stdout + result.stderr)[-4000:]}"
    return result
