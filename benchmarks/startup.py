"""Start-up: `python train.py --help`, and launch → first optimizer step of `python train.py`, against the bare
`python -c "import torch, pytorch_lightning"`.

    python benchmarks/startup.py --repeats 5

Each command is a fresh process (what a user waits for), interleaved, median of repeats. The first-step time is
taken by a callback (benchmarks/first_step_clock.py) that writes time.time() when the first optimizer step begins;
the run is the default `python train.py` stopped after that step (trainer.max_steps=1).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.time()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.time() - start


def first_step(env: dict[str, str], log_dir: str) -> float:
    clock = Path(tempfile.mkstemp(suffix=".time")[1])
    start = time.time()
    subprocess.run(
        [
            sys.executable,
            "train.py",
            f"paths.log_dir={log_dir}",
            "trainer.max_steps=1",
            "test_after_training=false",
            f"+callbacks.first_step_clock={{_target_: first_step_clock.FirstStepClock, path: '{clock}'}}",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stepped = float(clock.read_text())
    clock.unlink()
    return stepped - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paths = [str(ROOT / "src"), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    log_dir = tempfile.mkdtemp(prefix="litforge-startup-")
    arms = {
        "python train.py --help": lambda: wall([sys.executable, "train.py", "--help"], env),
        'python -c "import torch, pytorch_lightning"': lambda: wall(
            [sys.executable, "-c", "import torch, pytorch_lightning"], env
        ),
        "python train.py: launch → first optimizer step": lambda: first_step(env, log_dir),
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(args.repeats):
        for name in list(arms) if r % 2 == 0 else list(reversed(arms)):
            times[name].append(arms[name]())
    base = times['python -c "import torch, pytorch_lightning"']
    print(f"\n### Start-up (median of {args.repeats} interleaved runs; ratio to the bare import, per repeat)\n")
    print("| command | seconds | × bare import |")
    print("|---|---|---|")
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        print(f"| `{name}` | {statistics.median(values):.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
