"""How long does DQN take to solve CartPole-v1 here? Runs `python train.py experiment=cartpole_dqn` (one process per
seed, `logger=csv`) and reports, per seed: wall time, the gradient and environment steps to the first validation
with a mean greedy return >= 475, the step training stopped at, and the 100-episode test return of the best
checkpoint; then the mean ± std over seeds.

    python benchmarks/cartpole_dqn.py                          # seeds 42 1 2
    python benchmarks/cartpole_dqn.py --seeds 7 [overrides...]  # e.g. task.double_dqn=false

On a shared CPU run it as `OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/cartpole_dqn.py`.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLVED = 475.0


def run_seed(seed: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cmd = [
            sys.executable,
            str(ROOT / "train.py"),
            "experiment=cartpole_dqn",
            "logger=csv",
            f"paths.log_dir={tmp}",
            "print_config=false",
            "callbacks.progress_bar=null",
            "trainer.enable_progress_bar=false",
            f"seed={seed}",
            *overrides,
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        run = next((Path(tmp) / "cartpole_dqn" / "runs").iterdir())
        metrics = json.loads((run / "metrics.json").read_text())["metrics"]
        rows = list(csv.DictReader(next(run.rglob("metrics.csv")).open()))
        task = _read_task_config(run / ".hydra" / "config.yaml")
    val = [(int(r["step"]) + 1, float(r["val/return"])) for r in rows if r.get("val/return")]
    solved_at = next((step for step, ret in val if ret >= SOLVED), None)
    env_steps = None if solved_at is None else solved_at * task["env_steps_per_step"] + task["warmup_steps"]
    return {
        "seed": seed,
        "wall_s": wall,
        "solved_at": solved_at,
        "env_steps": env_steps,
        "stopped_at": val[-1][0] if val else 0,
        "test_return": metrics["test/return"],
        "solved_fraction": metrics.get("test/solved_fraction", 0.0),
    }


def _read_task_config(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())["task"]


def mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    overrides = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]  # Hydra overrides, anywhere
    args = parser.parse_args([a for a in sys.argv[1:] if a not in overrides])
    print(
        "| seed | wall s | grad steps to val >= 475 | env steps (incl. warm-up) | stopped at | test/return | "
        "test episodes >= 475 |"
    )
    print("|---|---|---|---|---|---|---|")
    results = []
    for seed in args.seeds:
        r = run_seed(seed, overrides)
        results.append(r)
        solved = "never" if r["solved_at"] is None else str(r["solved_at"])
        env = "-" if r["env_steps"] is None else str(r["env_steps"])
        print(
            f"| {seed} | {r['wall_s']:.0f} | {solved} | {env} | {r['stopped_at']} | {r['test_return']:.1f} | "
            f"{r['solved_fraction']:.0%} |",
            flush=True,
        )
    returns = [r["test_return"] for r in results]
    print(
        f"\ntest/return {mean_std(returns)} over {len(results)} seeds "
        f"({sum(x >= SOLVED for x in returns)}/{len(results)} >= {SOLVED:.0f}); "
        f"wall {mean_std([r['wall_s'] for r in results])} s (startup and the 100-episode test included)"
    )


if __name__ == "__main__":
    main()
