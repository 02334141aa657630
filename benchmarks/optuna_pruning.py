"""A 20-trial Optuna search on digits with and without pruning: best value, total wall time, trials pruned.

Each arm is the real command a user runs, `python train.py -m hparams_search=digits_optuna ...`, in its own sweep
folder, with the same sampler seed (so both arms draw the same first trials); the arms alternate over `--repeats`
(none, median, median, none, ...) so machine load drifts onto both. Two times per sweep: the command's wall time
(start-up included, the same in both arms) and the sum of its trials' durations as the study records them.

    OMP_NUM_THREADS=1 python benchmarks/optuna_pruning.py --trials 20 --max-epochs 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_sweep(pruner: str, args: argparse.Namespace, folder: Path) -> dict:
    """One sweep; its best value, trial counts and times."""
    import optuna

    sweep_dir = folder / f"{pruner}"
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        "hparams_search=digits_optuna",
        f"paths.log_dir={folder}/logs",
        f"hydra.sweep.dir={sweep_dir}",
        f"seed={args.seed}",
        f"trainer.max_epochs={args.max_epochs}",
        f"hydra.sweeper.n_trials={args.trials}",
        f"hydra.sweeper.pruner={pruner}",
        "print_config=false",
        "callbacks.progress_bar=null",
        *args.overrides,
    ]
    if pruner != "none":
        command.append(f"hydra.sweeper.pruner_args={{n_startup_trials:{args.startup},n_warmup_steps:{args.warmup}}}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{pruner} sweep failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    trials = optuna.load_study(study_name="digits_optuna", storage=f"sqlite:///{sweep_dir}/optuna.db").get_trials()
    trial_s = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials if t.datetime_complete)
    epochs = sum(len(t.intermediate_values) for t in trials) if pruner != "none" else len(trials) * args.max_epochs
    return {
        "pruner": pruner,
        "best": best["best"]["value"],
        "trials": best["trials"],
        "wall_s": wall,
        "trial_s": trial_s,
        "epochs": epochs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42, help="the run's and the TPE sampler's seed")
    parser.add_argument("--pruner", default="median", help="the pruned arm's hydra.sweeper.pruner")
    parser.add_argument("--startup", type=int, default=5, help="pruner_args.n_startup_trials")
    parser.add_argument("--warmup", type=int, default=1, help="pruner_args.n_warmup_steps (validations)")
    parser.add_argument("--repeats", type=int, default=1, help="sweeps per arm, alternating the order")
    parser.add_argument("--pruned-first", action="store_true", help="start with the pruned arm (then alternate)")
    parser.add_argument("overrides", nargs="*", help="more train.py overrides for every trial")
    args = parser.parse_args()

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="litforge-pruning-") as tmp:
        for repeat in range(args.repeats):
            order = ["none", args.pruner] if (repeat + args.pruned_first) % 2 == 0 else [args.pruner, "none"]
            for pruner in order:
                result = run_sweep(pruner, args, Path(tmp) / str(repeat))
                results.append(result)
                print(
                    f"  {pruner:>9}: best val/acc {result['best']:.4f}, {result['trials']}, "
                    f"{result['wall_s']:.0f} s wall",
                    flush=True,
                )

    print(
        f"\n{args.trials} trials, trainer.max_epochs={args.max_epochs}, seed {args.seed}, "
        f"{args.pruner} pruner (n_startup_trials={args.startup}, n_warmup_steps={args.warmup})"
    )
    print(
        f"{'pruner':>9} | {'best val/acc':>12} | {'pruned':>6} | {'epochs run':>10} | {'trials s':>8} | {'wall s':>6}"
    )
    for arm in ("none", args.pruner):
        rows = [r for r in results if r["pruner"] == arm]
        n = len(rows)
        print(
            f"{arm:>9} | {sum(r['best'] for r in rows) / n:12.4f} | {sum(r['trials']['pruned'] for r in rows) / n:6.1f}"
            f" | {sum(r['epochs'] for r in rows) / n:10.1f} | {sum(r['trial_s'] for r in rows) / n:8.1f}"
            f" | {sum(r['wall_s'] for r in rows) / n:6.1f}"
        )
    base = [r for r in results if r["pruner"] == "none"]
    pruned = [r for r in results if r["pruner"] == args.pruner]
    trial_ratio = sum(r["trial_s"] for r in pruned) / sum(r["trial_s"] for r in base)
    wall_ratio = sum(r["wall_s"] for r in pruned) / sum(r["wall_s"] for r in base)
    print(f"time ratio {args.pruner}/none: trials {trial_ratio:.2f}, wall {wall_ratio:.2f}")


if __name__ == "__main__":
    main()
