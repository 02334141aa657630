"""How long does DQN take to solve CartPole-v1 here? Runs `python train.py experiment=cartpole_dqn` (one process,
`logger=csv`) and reports wall time, the environment and gradient steps to the first validation with a mean greedy
return >= 475, and the final 100-episode test return of the best checkpoint.

    python benchmarks/cartpole_dqn.py [extra overrides...]
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cmd = [sys.executable, str(ROOT / "train.py"), "experiment=cartpole_dqn", "logger=csv", f"paths.log_dir={tmp}",
               "print_config=false", "callbacks.progress_bar=null", *sys.argv[1:]]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        run = next((Path(tmp) / "cartpole_dqn" / "runs").iterdir())
        result = json.loads((run / "metrics.json").read_text())
        rows = list(csv.DictReader(next(run.rglob("metrics.csv")).open()))
        cfg = (run / ".hydra" / "config.yaml").read_text()
    env_per_step = int(next(line.split(":")[1] for line in cfg.splitlines() if "env_steps_per_step" in line))
    solved_at = next((int(r["step"]) for r in rows if r.get("val/return") and float(r["val/return"]) >= 475), None)
    m = result["metrics"]
    print(f"wall time (startup included): {wall:.0f} s")
    if solved_at is None:
        print("validation mean return never reached 475")
    else:
        print(f"first validation with mean return >= 475: after {solved_at} gradient steps "
              f"({solved_at * env_per_step} environment steps + warm-up)")
    print(f"test/return (best checkpoint, 100 greedy episodes): {m.get('test/return'):.1f}; "
          f"episodes >= 475: {m.get('test/solved_fraction', 0):.0%}")


if __name__ == "__main__":
    main()
