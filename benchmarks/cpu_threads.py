"""`experiment=gpt_char` on an idle machine and beside two busy processes, with each way of choosing CPU threads.

    python benchmarks/cpu_threads.py --repeats 3
    python benchmarks/cpu_threads.py --repeats 1 --steps 20   # a smoke run (~4 min on 2 cores)

Arms, each a fresh `python train.py experiment=gpt_char` of `--steps` training steps (no test, a few validation
batches), timed from launch to exit:

- `auto`: litforge's default (`threads=auto`): the usable cores less those busy at the start, per local rank;
- `omp1`: `OMP_NUM_THREADS=1`, the advice for shared machines before `threads=auto`;
- `torch default`: `threads=<torch's own default count>` (every core of the machine), what a run did before.

Conditions: `idle` (nothing else started), and `loaded`: two processes each spinning float32 matmuls on one thread,
started before the run and stopped after it. Repeats interleave conditions and arms (the order alternates), and the
table gives medians and two ratios: `auto` / the best arm under load (goal <= 1.2) and `auto` / `torch default` idle
(goal <= 1.0). The start line's `threads:` is printed for `auto`, so the table says what it chose.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, median, print_table  # noqa: E402

SPIN = "import torch\na = torch.randn(512, 512)\nwhile True:\n    a @ a\n"


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]), **extra}


def torch_default_threads() -> int:
    """torch's own intra-op count in a fresh process without OMP_NUM_THREADS."""
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=environment(), capture_output=True, text=True).stdout)


def train(steps: int, arm: str, default: int, log_dir: str) -> tuple[float, str]:
    """One run: its wall seconds and its start line's `threads:` note."""
    overrides = [
        "experiment=gpt_char",
        "trainer.max_epochs=1",
        f"trainer.limit_train_batches={steps}",
        "trainer.limit_val_batches=5",
        "test_after_training=false",
        "callbacks.progress_bar=null",
        f"paths.log_dir={log_dir}",
    ]
    env = environment(OMP_NUM_THREADS="1") if arm == "omp1" else environment()
    if arm == "torch default":
        overrides.append(f"threads={default}")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "train.py", *overrides], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{arm}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}")
    found = re.search(r"^threads: .*$", proc.stdout, re.MULTILINE)
    return wall, found[0] if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="training steps per run (an epoch is ~205)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes beside the loaded runs")
    args = parser.parse_args()
    default = torch_default_threads()
    arms = ["auto", "omp1", "torch default"]
    walls: dict[tuple[str, str], list[float]] = {}
    chose: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="litforge-threads-") as log_dir:
        for r in range(args.repeats):
            for condition in ("idle", "loaded") if r % 2 == 0 else ("loaded", "idle"):
                busy = []
                if condition == "loaded":
                    spin_env = environment(OMP_NUM_THREADS="1")
                    busy = [subprocess.Popen([sys.executable, "-c", SPIN], env=spin_env) for _ in range(args.busy)]
                    time.sleep(3)  # imported and spinning
                try:
                    for arm in arms if r % 2 == 0 else reversed(arms):
                        wall, threads = train(args.steps, arm, default, log_dir)
                        walls.setdefault((condition, arm), []).append(wall)
                        if arm == "auto":
                            chose[condition] = threads
                        print(f"repeat {r} {condition:6} {arm:13} {wall:6.1f} s  {threads}", flush=True)
                finally:
                    for proc in busy:
                        proc.kill()
                        proc.wait()
    rows = []
    for condition in ("idle", "loaded"):
        med = {arm: median(walls[(condition, arm)]) for arm in arms}
        rows.append([condition, *(f"{med[a]:.1f}" for a in arms), f"{med['auto'] / min(med.values()):.2f}"])
        rows[-1].append(f"{med['auto'] / med['torch default']:.2f}")
        rows[-1].append(chose[condition])
    print_table(
        f"experiment=gpt_char, {args.steps} steps, wall s (median of {args.repeats}); "
        f"torch default = {default} threads; loaded = {args.busy} busy processes",
        ["machine", *arms, "auto / best", "auto / torch default", "auto chose"],
        rows,
    )


if __name__ == "__main__":
    main()
