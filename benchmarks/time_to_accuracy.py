"""Time to accuracy on the embedded digits: litforge's default run vs scikit-learn's MLPClassifier, same split.

    python benchmarks/time_to_accuracy.py --seeds 0 1 2 --threads 2

litforge: `litforge.train.train(cfg)` on the default config (`python train.py seed=S`) minus the interpreter and
import start-up (see benchmarks/startup.py for that), from the job's start to the end of its test pass; the time at
which the validation pass first reached the target is reported too, with the test accuracy of the best checkpoint.
scikit-learn: `MLPClassifier` with the same hidden sizes, trained on the same training split (litforge keeps 10 % of
it for validation; scikit-learn's early stopping does the same), tested on the same held-out test split.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import common  # noqa: F401  (puts src/ on sys.path)
import torch
from common import compose, quiet
from omegaconf import open_dict
from pytorch_lightning.callbacks import Callback

TARGET = 0.97


class FirstTimeAt(Callback):
    """Seconds from fit start until `val/acc` first reaches the target."""

    last: "FirstTimeAt | None" = None

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.reached: float | None = None
        FirstTimeAt.last = self

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        acc = trainer.callback_metrics.get("val/acc")
        if self.reached is None and not trainer.sanity_checking and acc is not None and float(acc) >= TARGET:
            self.reached = time.perf_counter() - self.start


def run_litforge(seed: int) -> tuple[float, float | None, float]:
    from litforge.train import train

    cfg = compose(f"seed={seed}", "print_config=false")
    with open_dict(cfg):
        cfg.callbacks["zz_first_time"] = {"_target_": "time_to_accuracy.FirstTimeAt"}
    start = time.perf_counter()
    result = train(cfg)
    total = time.perf_counter() - start
    return total, FirstTimeAt.last.reached if FirstTimeAt.last else None, result["metrics"]["test/acc"]


def run_sklearn(seed: int, threads: int) -> tuple[float, float]:
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    from litforge.data.digits import DigitsDataModule

    dm = DigitsDataModule()  # split_seed 0: the same train/test split as every litforge run
    dm.setup()
    x_train = torch.cat([dm._splits["train"][0], dm._splits["val"][0]]).flatten(1).numpy()
    y_train = torch.cat([dm._splits["train"][1], dm._splits["val"][1]]).numpy()
    x_test, y_test = dm._splits["test"][0].flatten(1).numpy(), dm._splits["test"][1].numpy()
    with threadpool_limits(threads):
        start = time.perf_counter()
        clf = MLPClassifier(hidden_layer_sizes=(256, 256), early_stopping=True, validation_fraction=0.1,
                            random_state=seed, max_iter=300)
        clf.fit(x_train, y_train)
        acc = clf.score(x_test, y_test)
        return time.perf_counter() - start, acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    lf, sk = [], []
    for seed in args.seeds:  # interleaved
        lf.append(run_litforge(seed))
        sk.append(run_sklearn(seed, args.threads))

    def ms(values: list[float]) -> str:
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values) if len(values) > 1 else 0:.2f}"

    reached = [r[1] for r in lf if r[1] is not None]
    print(f"\n### Digits to {TARGET:.0%} (threads={args.threads}, seeds {args.seeds}, mean ± std)\n")
    print("| run | wall s (whole job) | s until val/acc ≥ 97 % | test acc |")
    print("|---|---|---|---|")
    print(f"| litforge `python train.py` (in-process, no start-up) | {ms([r[0] for r in lf])} | "
          f"{ms(reached) if reached else 'not reached'} ({len(reached)}/{len(lf)} seeds) | "
          f"{ms([r[2] for r in lf])} |")
    print(f"| scikit-learn MLPClassifier(256, 256) | {ms([r[0] for r in sk])} | – | {ms([r[1] for r in sk])} |")


if __name__ == "__main__":
    main()
