"""Shared test helpers: run the real CLI in a subprocess, compose configs in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

# One intra-op thread per process, for this process, its workers and every CLI run they start (set before anything
# imports torch). The suite keeps both cores busy with two workers, each with its own CLI runs; torch's default of a
# thread per core made OpenMP threads spin against the other worker's process: the same in-process test took 12 s
# in one run and 70 s in another. A test that is about threads sets them itself.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def launch_state() -> dict[str, str | None]:
    """The launch variables of this process now (what :func:`launch_state_left_behind` compares against)."""
    from litforge.parallel.launch import LAUNCH_ENV

    return {key: os.environ.get(key) for key in LAUNCH_ENV}


def launch_state_left_behind(before: dict[str, str | None]) -> str | None:
    """Undo launch variables changed since `before` and destroy an initialised process group; say what was left
    (None when nothing was)."""
    leaked = [key for key, value in before.items() if os.environ.get(key) != value]
    for key in leaked:
        if before[key] is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before[key]
    group = False
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        group = dist.is_available() and dist.is_initialized()
        if group:
            dist.destroy_process_group()
    if not (leaked or group):
        return None
    return (
        f"this test left {', '.join(leaked) or 'no launch variable'} set and {'an' if group else 'no'} "
        "initialised process group: run in-process launching jobs inside "
        "litforge.parallel.launch.launched_ranks_cleaned_up()"
    )


# what a test's marks say of its cost, for the order below: real cluster jobs and two-node runs wait longest
_WEIGHT = {"slurm": 8, "netns": 8, "distributed": 3, "slow": 1}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the costliest test modules first (by their costliest test, then by their total), each module's tests still
    together and in file order.

    Why: pytest-xdist's `worksteal` gives each of the two workers half of the list in order and, when one runs dry,
    moves the tail of the other's queue to it. In file-name order a minute-long SLURM test could start last, with the
    other worker idle for its whole length; heavy modules first leave only short tests for the end, where stealing
    evens the two out. Modules stay contiguous so their module-scoped fixtures (gloo ranks, shared reference runs)
    are built once per worker, as before.
    """
    heaviest: dict[Path, int] = {}
    total: dict[Path, int] = {}
    for item in items:
        cost = max((_WEIGHT.get(mark.name, 0) for mark in item.iter_markers()), default=0)
        heaviest[item.path] = max(heaviest.get(item.path, 0), cost)
        total[item.path] = total.get(item.path, 0) + cost
    items.sort(key=lambda item: (-heaviest[item.path], -total[item.path]))  # a stable sort: file order within a module


@pytest.fixture(autouse=True)
def no_launch_state_left_behind() -> Iterator[None]:
    """Fail the test that leaves launch variables (MASTER_PORT, LOCAL_RANK, ...) or an initialised process group in
    the pytest worker: every later multi-device run from that worker would take itself for an externally started
    rank and wait for its peers until its timeout (a 300 s hang each, found once after an in-process pipeline run).
    Cleans up first, so only the offending test fails."""
    before = launch_state()
    yield
    problem = launch_state_left_behind(before)
    if problem:
        pytest.fail(problem)


# a few batches, a few epochs: each CLI run takes seconds
TINY = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "print_config=false",
    "callbacks.progress_bar=null",
    # the test-time prediction grid still drawn, on 4 images instead of 32: matplotlib's layout of 32 titled subplots
    # cost 0.55 s of CPU per run (2.6 s -> 2.0 s for a tiny train run); the default 32 runs in test_cli's default run
    "callbacks.tensorboard_extras.max_samples=4",
]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(
    script: str,
    *overrides: str,
    log_dir: Path,
    timeout: float = 240,
    env: dict | None = None,
    extra_args: tuple[str, ...] = (),
    fresh_process: bool = False,
) -> CliResult:
    """`python <script> paths.log_dir=<log_dir> overrides...` from the repo root, as a user would run it.

    By default the command runs in a child forked from a warm server (tests/cli_server.py: same process semantics,
    without the 8-15 s of imports); `fresh_process=True` starts a new interpreter, for what only that shows.
    """
    argv = [str(ROOT / script), *extra_args, f"paths.log_dir={log_dir}", *overrides]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if fresh_process or not _CliServer.usable():
        proc = subprocess.run(
            [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    return _CliServer.get().run(argv, cwd=ROOT, env=full_env, timeout=timeout)


HEAVY_MODULES = ("torch", "pytorch_lightning", "lightning_fabric", "torchvision", "torchmetrics")

# `python <script> <args>` in a fresh interpreter, reporting afterwards which heavy modules the run had imported
_IMPORT_PROBE = """
import json, runpy, sys
sys.argv = {argv!r}
sys.path[0] = {script_dir!r}
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
imported = sorted(m for m in {heavy!r} if m in sys.modules)
print("LITFORGE-PROBE " + json.dumps({{"exit": code or 0, "imported": imported}}))
"""


def run_fresh_probe(
    script: str, *overrides: str, log_dir: Path, hash_seed: int, timeout: float = 240
) -> tuple[CliResult, list[str]]:
    """`python <script> paths.log_dir=<log_dir> overrides...` in a new interpreter with `PYTHONHASHSEED=hash_seed`
    (not the fork server, where torch is already imported and the hash seed is the server's): the result, and which
    of `HEAVY_MODULES` the run had imported when it exited. For checks that a refusal comes before torch is imported."""
    argv = [str(ROOT / script), f"paths.log_dir={log_dir}", *overrides]
    code = _IMPORT_PROBE.format(argv=argv, script_dir=str(ROOT), heavy=HEAVY_MODULES)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": str(hash_seed)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )
    probe = [line for line in proc.stdout.splitlines() if line.startswith("LITFORGE-PROBE ")]
    assert probe, f"the probe did not finish (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
    report = json.loads(probe[-1].split(" ", 1)[1])
    stdout = proc.stdout.replace(probe[-1] + "\n", "")
    return CliResult(report["exit"], stdout, proc.stderr), report["imported"]


class _CliServer:
    """Client of tests/cli_server.py: one warm server per test process, started on first use."""

    _instance: _CliServer | None = None

    @staticmethod
    def usable() -> bool:
        return hasattr(os, "fork") and os.environ.get("LITFORGE_TEST_FRESH_CLI") != "1"  # =1: every run fresh

    @classmethod
    def get(cls) -> _CliServer:
        if cls._instance is None or cls._instance.proc.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        import atexit

        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "cli_server.py")],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=1,
        )
        atexit.register(self.proc.kill)

    def _answer(self, timeout: float) -> dict:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("tests/cli_server.py ended")
        return json.loads(line)

    def run(self, argv: list[str], cwd: Path, env: dict, timeout: float) -> CliResult:
        import signal
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
            out.touch()
            err.touch()
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            pid = self._answer(60)["pid"]
            try:
                returncode = self._answer(timeout)["returncode"]
            except TimeoutError:
                os.killpg(pid, signal.SIGKILL)  # the child and what it started, as subprocess.run's timeout would
                self._answer(60)
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text()) from None
            return CliResult(returncode, out.read_text(), err.read_text())


def run_dirs(log_dir: Path, task_name: str = "train") -> list[Path]:
    return sorted((log_dir / task_name / "runs").glob("*"))


def single_run(log_dir: Path, task_name: str = "train") -> Path:
    runs = run_dirs(log_dir, task_name)
    assert len(runs) == 1, f"expected one run folder, found {runs}"
    return runs[0]


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture
def compose_cfg(tmp_path: Path) -> Iterator:
    """Compose conf/train.yaml in-process (no torch import needed for composition)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)

    def _compose(*overrides: str, config_name: str = "train"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(
                config_name=config_name,
                overrides=[f"paths.output_dir={tmp_path}", f"paths.data_dir={tmp_path / 'data'}", *overrides],
            )

    yield _compose
    GlobalHydra.instance().clear()


def make_image_folder(
    root: Path,
    classes: tuple[str, ...] = ("cat", "dog", "fox"),
    per_class: int = 8,
    size: tuple[int, int] = (8, 8),
    mode: str = "L",
) -> Path:
    """A tiny class-per-folder image dataset whose classes differ in brightness (so it is learnable)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for index, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            level = 40 + 80 * index
            channels = 3 if mode == "RGB" else 1
            pixels = np.clip(rng.normal(level, 10, size=(size[1], size[0], channels)), 0, 255).astype("uint8")
            Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode=mode).save(folder / f"{i:03d}.png")
    return root


@pytest.fixture(scope="module")
def ranks(request: pytest.FixtureRequest) -> Iterator[object]:
    """Two gloo ranks (tests/gloo.py; `GLOO_WORLD_SIZE` in the module for more) shared by one test module's
    distributed tests: starting them costs a torch + Lightning import each. They preload the module's `GLOO_PRELOAD`
    names, by default the test module itself."""
    from gloo import GlooRanks

    pool = GlooRanks(
        getattr(request.module, "GLOO_WORLD_SIZE", 2),
        preload=tuple(getattr(request.module, "GLOO_PRELOAD", (request.module.__name__,))),
    )
    yield pool
    pool.close()


def skip_unless_required(flag: str, reason: str) -> NoReturn:
    """Skip the test for `reason`, or fail it when the environment variable `flag` is 1: CI sets the flags
    (.ci/run: LITFORGE_REQUIRE_SLURM, LITFORGE_REQUIRE_NETNS) where these tests must run, so a missing tool or
    permission there is a failure, not a silent skip."""
    if os.environ.get(flag) == "1":
        pytest.fail(f"{flag}=1 and {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """A real single-node SLURM cluster on this machine (tests/slurm_cluster.py starts it, or reuses a running one);
    its partition's name. Where it cannot start the test skips with the reason, or fails under
    `LITFORGE_REQUIRE_SLURM=1` (.ci/run sets it: CI must run these tests, not skip them)."""
    from slurm_cluster import PARTITION, ensure_cluster

    reason = ensure_cluster()
    if reason:
        skip_unless_required("LITFORGE_REQUIRE_SLURM", f"no SLURM cluster: {reason}")
    return PARTITION


def stub_checkpoint(folder: Path) -> Path:
    """The entries of a litforge checkpoint that eval/predict/export/generate judge before they start."""
    import torch

    path = folder / "last.ckpt"
    data = {"_target_": "litforge.data.digits.DigitsDataModule"}
    meta = {"task_class": "litforge.tasks.classification.ClassificationTask", "run_config": {"data": data}}
    torch.save({"state_dict": {"net.weight": torch.zeros(2)}, "hyper_parameters": {}, "litforge": meta}, path)
    return path
