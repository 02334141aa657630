"""Does `scheduler=warmup_cosine` train `experiment=gpt_char` better than its plain per-epoch cosine?

Runs `python train.py experiment=gpt_char` with each schedule, arms interleaved seed by seed (machine load moves
both alike), and prints each run's best val/loss and test/loss, the medians and the per-seed differences.
A lower loss is better; the losses do not depend on machine load, only the wall times do.

    OMP_NUM_THREADS=1 python benchmarks/warmup_gpt_char.py --seeds 1 2 3
    OMP_NUM_THREADS=1 python benchmarks/warmup_gpt_char.py --seeds 1 2 3 -- data.max_chars=40000 model.dim=64  # shorter
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"cosine (epoch)": ["scheduler=cosine"], "warmup_cosine (step)": ["scheduler=warmup_cosine"]}


def run(arm: list[str], seed: int, log_dir: Path, extra: list[str]) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "experiment=gpt_char",
        *arm,
        f"seed={seed}",
        f"paths.log_dir={log_dir}",
        "print_config=false",
        "callbacks.progress_bar=null",
        *extra,
    ]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (metrics_file,) = log_dir.glob("gpt_char/runs/*/metrics.json")
    metrics = json.loads(metrics_file.read_text())["metrics"]
    return {"val/loss": metrics["val/loss"], "test/loss": metrics["test/loss"], "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("extra", nargs="*", help="more overrides for both arms, e.g. trainer.max_epochs=4")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name, arm in ARMS.items():
                log_dir = Path(tmp) / f"{seed}-{len(results[name])}-{name.split()[0]}"
                results[name].append(run(arm, seed, log_dir, args.extra))
                print(
                    f"seed {seed} {name:22s} " + "  ".join(f"{k} {v:.4f}" for k, v in results[name][-1].items()),
                    flush=True,
                )
    print(f"\n{'schedule':22s} {'val/loss (median)':>18s} {'test/loss (median)':>19s} {'wall s (median)':>16s}")
    for name, rows in results.items():
        val, test, wall = (statistics.median(r[key] for r in rows) for key in ("val/loss", "test/loss", "wall_s"))
        print(f"{name:22s} {val:18.4f} {test:19.4f} {wall:16.1f}")
    base, new = results.values()
    diffs = [b["test/loss"] - n["test/loss"] for b, n in zip(base, new, strict=True)]
    print(
        f"test/loss cosine - warmup_cosine per seed: {', '.join(f'{d:+.4f}' for d in diffs)} "
        f"(positive: warmup_cosine is better); OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )


if __name__ == "__main__":
    main()
