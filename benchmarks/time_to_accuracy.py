"""Time to accuracy on the embedded digits: litforge vs scikit-learn's MLPClassifier, same split, same target.

    python benchmarks/time_to_accuracy.py --seeds 0 1 2 --threads 2
    python benchmarks/time_to_accuracy.py --litforge-args steps_per_call=8   # another litforge arm (repeatable)

The measure is the issue's: wall seconds until the model first reaches 97 % accuracy on the test split, checked
once per epoch in both arms (the check's own time is left out of the clock, in both).

- litforge: `litforge.jobs.train.train(cfg)` on the config `python train.py seed=S [args]` composes, clock started just
  before the call (so Trainer set-up, TensorBoard, model graph and the sanity check count; the interpreter and the
  imports do not, see benchmarks/startup.py), test accuracy of the current weights after each validation pass.
- plain PyTorch: a hand-written loop on the same net, batch size, optimizer and epoch schedule (test check as above),
  for the floor PyTorch itself sets on this machine.
- scikit-learn: `MLPClassifier` with the same hidden sizes on the same training split (train + validation images:
  it needs no validation split to stop here), one `partial_fit` epoch at a time (Adam, batches of 200, its defaults).

Every arm's clock includes reading the data (scikit-learn's `load_digits` through the same datamodule).

"whole job" is the full run besides: litforge's default 30 epochs (early stopping, the final test pass and the
TensorBoard images included) and scikit-learn's `fit` with early stopping.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from omegaconf import open_dict
from pytorch_lightning.callbacks import Callback

import common  # noqa: F401  (puts src/ on sys.path)
from common import compose, quiet

TARGET = 0.97
CLOCK: dict[str, float] = {"start": 0.0}


class TestAccuracyProbe(Callback):
    """After each validation pass: the test accuracy of the current weights; its own time is off the clock."""

    last: "TestAccuracyProbe | None" = None

    def __init__(self) -> None:
        self.probe_time = 0.0
        self.reached: float | None = None
        self.epochs: int | None = None
        TestAccuracyProbe.last = self

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or self.reached is not None:
            return
        t0 = time.perf_counter()
        datamodule = trainer.datamodule
        images, labels = datamodule._splits["test"]
        with torch.no_grad():
            acc = float((pl_module(datamodule.normalize(images)).argmax(1) == labels).float().mean())
        if acc >= TARGET:
            self.reached, self.epochs = t0 - CLOCK["start"] - self.probe_time, trainer.current_epoch + 1
        self.probe_time += time.perf_counter() - t0


def run_litforge(seed: int, extra: list[str]) -> tuple[float | None, int | None, float, float]:
    # Hydra instantiates the probe from the importable module `time_to_accuracy`, not from this `__main__`
    import time_to_accuracy as shared
    from litforge.jobs.train import train

    cfg = compose(f"seed={seed}", "print_config=false", *extra)
    with open_dict(cfg):
        cfg.callbacks["zz_test_probe"] = {"_target_": "time_to_accuracy.TestAccuracyProbe"}
    shared.TestAccuracyProbe.last = None
    shared.CLOCK["start"] = time.perf_counter()
    result = train(cfg)
    probe = shared.TestAccuracyProbe.last
    assert probe is not None, "the probe callback was not used"
    total = time.perf_counter() - shared.CLOCK["start"] - probe.probe_time
    return probe.reached, probe.epochs, total, result["metrics"]["test/acc"]


def run_plain(seed: int, extra: list[str]) -> tuple[float | None, int | None, float, float]:
    """benchmarks/common.py's hand-written PyTorch loop on the same config, with the same per-epoch test probe."""
    from common import run_plain as plain_loop

    cfg = compose(f"seed={seed}", "print_config=false", *extra)
    state: dict[str, Any] = {"probe_time": 0.0, "reached": None, "epochs": None, "acc": 0.0}

    def probe(epoch: int, net: torch.nn.Module, splits: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        images, labels = splits["test"]
        with torch.no_grad():
            state["acc"] = float((net(images).argmax(1) == labels).float().mean())
        if state["reached"] is None and state["acc"] >= TARGET:
            state["reached"], state["epochs"] = t0 - start - state["probe_time"], epoch + 1
        state["probe_time"] += time.perf_counter() - t0

    start = time.perf_counter()
    plain_loop(cfg, after_epoch=probe)
    return state["reached"], state["epochs"], time.perf_counter() - start - state["probe_time"], state["acc"]


def digits_arrays() -> tuple[np.ndarray, ...]:
    from litforge.data.digits import DigitsDataModule

    dm = DigitsDataModule()  # split_seed 0: the same train/val/test split as every litforge run
    dm.setup()
    x_train = torch.cat([dm._splits["train"][0], dm._splits["val"][0]]).flatten(1).float().numpy()
    y_train = torch.cat([dm._splits["train"][1], dm._splits["val"][1]]).numpy()
    return x_train, y_train, dm._splits["test"][0].flatten(1).float().numpy(), dm._splits["test"][1].numpy()


def run_sklearn(seed: int, threads: int) -> tuple[float | None, int | None, float, float]:
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    with threadpool_limits(threads):
        start, probe_time, reached, epochs = time.perf_counter(), 0.0, None, None
        x_train, y_train, x_test, y_test = digits_arrays()  # on the clock, as the other arms' data loading is
        clf = MLPClassifier(hidden_layer_sizes=(256, 256), random_state=seed)
        for epoch in range(200):
            clf.partial_fit(x_train, y_train, classes=np.arange(10))
            t0 = time.perf_counter()
            if clf.score(x_test, y_test) >= TARGET:
                reached, epochs = t0 - start - probe_time, epoch + 1
                break
            probe_time += time.perf_counter() - t0
        start = time.perf_counter()
        x_train, y_train, x_test, y_test = digits_arrays()
        clf = MLPClassifier(
            hidden_layer_sizes=(256, 256), early_stopping=True, validation_fraction=0.1, random_state=seed, max_iter=300
        )
        clf.fit(x_train, y_train)
        acc = clf.score(x_test, y_test)
        return reached, epochs, time.perf_counter() - start, acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--litforge-args",
        action="append",
        default=[],
        help="overrides for one more litforge arm, space-separated (repeatable)",
    )
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    arms: dict[str, Any] = {"litforge `python train.py`": lambda s: run_litforge(s, [])}
    for spec in args.litforge_args:
        arms[f"litforge `python train.py {spec}`"] = lambda s, spec=spec: run_litforge(s, spec.split())
    arms["plain PyTorch loop, same config"] = lambda s: run_plain(s, [])
    for spec in args.litforge_args:
        arms[f"plain PyTorch loop, {spec}"] = lambda s, spec=spec: run_plain(s, spec.split())
    arms["scikit-learn MLPClassifier(256, 256)"] = lambda s: run_sklearn(s, args.threads)
    results: dict[str, list[Any]] = {name: [] for name in arms}
    for seed in args.seeds:  # interleaved: load drifts hit every arm alike
        for name, arm in arms.items():
            results[name].append(arm(seed))

    def ms(values: list[float]) -> str:
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values) if len(values) > 1 else 0:.2f}"

    sk_reached = [r[0] for r in results["scikit-learn MLPClassifier(256, 256)"] if r[0] is not None]
    print(f"\n### Digits to {TARGET:.0%} test accuracy (threads={args.threads}, seeds {args.seeds}, mean ± std)\n")
    print("| run | s to 97 % test acc | epochs | vs scikit-learn | whole job s | its test acc |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        reached = [r[0] for r in rows if r[0] is not None]
        epochs = [r[1] for r in rows if r[1] is not None]
        ratio = f"{statistics.mean(reached) / statistics.mean(sk_reached):.2f}×" if reached and sk_reached else "–"
        print(
            f"| {name} | {ms(reached) if reached else 'not reached'} ({len(reached)}/{len(rows)}) | "
            f"{ms(epochs) if epochs else '–'} | {ratio} | {ms([r[2] for r in rows])} | {ms([r[3] for r in rows])} |"
        )


if __name__ == "__main__":
    main()
