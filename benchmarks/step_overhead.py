"""Step overhead: litforge's training loop (as `python train.py` configures it: logger, progress bar, checkpointing,
early stopping, LR monitor all on) vs a plain PyTorch loop on the same net, data, batch, optimizer and threads.

    python benchmarks/step_overhead.py                  # all cases, 5 interleaved repeats
    python benchmarks/step_overhead.py --cases tiny_mlp --repeats 3 --threads 1
    python benchmarks/step_overhead.py --variants       # also litforge with single parts switched off
    python benchmarks/step_overhead.py --steps-per-call 4 16 auto  # litforge arms with steps_per_call=N (default: 8)
    python benchmarks/step_overhead.py --switches --cases cnn  # each speed switch (compile, bf16, ...) in the same runs

Prints, per case: seconds per optimizer step (median of repeats), the ratio to the plain loop and to litforge's
default arm (medians of the per-repeat ratios), seconds per whole epoch (validation and checkpointing included), its
ratio to the plain loop and to the plain loop that also keeps what a litforge run keeps ("plain + records": per-epoch
TensorBoard scalars, a resumable last.pt and a best.pt copy, the way a careful user writes them; litforge keeps more:
the best checkpoint by the monitored metric, durable fsync'ed writes, metrics.json, LR monitor), and Python calls
per step.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import OmegaConf, open_dict

import common  # noqa: F401  (puts src/ on sys.path)
from common import compose, interleave, median, print_table, quiet, run_litforge, run_plain, synthetic_data_cfg

# name -> (overrides, data config or None for the configured digits, epochs, count window (epoch, batch, steps))
CASES: dict[str, tuple[list[str], dict[str, Any] | None, int, tuple[int, int, int]]] = {
    # `python train.py` as shipped: digits MLP 64→256→256→10, batch 64, AdamW, cosine; 21 steps per epoch
    "digits_default": ([], None, 8, (1, 5, 10)),
    # the tiny MLP: 784→256→10 at batch 64 (MNIST-shaped synthetic images), 90 steps per epoch
    "tiny_mlp": (
        ["model.hidden_dims=[256]", "model.dropout=0.0"],
        synthetic_data_cfg((1, 28, 28), train_size=6400, batch_size=64),
        3,
        (1, 10, 20),
    ),
    # compute-heavy: the CNN on CIFAR-shaped images, batch 64 (9.3 GFLOP per step, ≥ 20 ms), 12 steps per epoch
    "cnn": (["model=cnn"], synthetic_data_cfg((3, 32, 32), train_size=64 * 14, batch_size=64), 3, (1, 2, 5)),
}

# diagnostic variants of the litforge arm: which configured part costs what
VARIANTS: dict[str, list[str]] = {
    "TQDM bar (Lightning's default)": ["callbacks.progress_bar=null"],
    "no progress bar": ["callbacks.progress_bar=null", "trainer.enable_progress_bar=false"],
    "no logger": ["~logger"],
    "callbacks=none": ["callbacks=none", "trainer.enable_progress_bar=false"],
    # Lightning's own loop, validation and epoch machinery with nothing of litforge's around it: the floor
    "Lightning alone (callbacks=none, no bar, no logger), steps_per_call=auto": [
        "callbacks=none",
        "trainer.enable_progress_bar=false",
        "~logger",
        "steps_per_call=auto",
    ],
}
# the one-key speed switches, each timed against litforge's default arm in the same interleaved runs (--switches)
SWITCHES: dict[str, list[str]] = {
    "compile=true": ["compile=true"],
    "trainer.precision=bf16-mixed": ["trainer.precision=bf16-mixed"],
    "channels_last=true": ["channels_last=true"],
    "data.on_device=true": ["data.on_device=true"],  # a no-op on CPU: the control arm
    "callbacks=[default,ema]": ["callbacks=[default,ema]"],
}
# litforge with steps_per_call=N (N optimizer steps per Lightning step): --steps-per-call 4 16


def build_cfg(case: str, extra: Sequence[str] = ()) -> Any:
    overrides, data_cfg, epochs, _ = CASES[case]
    cfg = compose(*overrides, f"trainer.max_epochs={epochs}", "trainer.num_sanity_val_steps=0", *extra)
    if data_cfg is not None:
        with open_dict(cfg):
            cfg.data = OmegaConf.create(data_cfg)
    return cfg


def measure(
    case: str, repeats: int, threads: int, variants: bool, steps_per_call: Sequence[str] = (), switches: bool = False
) -> list[list[Any]]:
    window = CASES[case][3]

    def litforge(extra: Sequence[str] = ()) -> Any:
        torch.set_num_threads(threads)
        rec = run_litforge(build_cfg(case, extra))
        assert torch.get_num_threads() == threads, "Lightning changed the thread count"
        return rec

    def plain(keep_records: bool = False) -> Any:
        torch.set_num_threads(threads)
        return run_plain(build_cfg(case), keep_records=keep_records)

    arms = {"plain": plain, "plain + records": lambda: plain(keep_records=True), "litforge": litforge}
    if variants:
        for name, extra in VARIANTS.items():
            arms[f"litforge, {name}"] = lambda extra=extra: litforge(extra)
    for n in steps_per_call:
        arms[f"litforge, steps_per_call={n}"] = lambda n=n: litforge([f"steps_per_call={n}"])
    if switches:
        for name, extra in SWITCHES.items():
            arms[f"litforge, {name}"] = lambda extra=extra: litforge(extra)
    runs = interleave(arms, repeats)
    # call counts: one extra, untimed run per arm with the profiler on for `window` steps
    calls = {
        "plain": run_plain(build_cfg(case), count_window=window).calls_per_step,
        "plain + records": run_plain(build_cfg(case), count_window=window, keep_records=True).calls_per_step,
        "litforge": run_litforge(build_cfg(case), count_window=window).calls_per_step,
    }
    if variants:
        for name, extra in VARIANTS.items():
            grouped = any(o.startswith("steps_per_call=") for o in extra)  # about as many steps as N=8, as below
            calls[f"litforge, {name}"] = run_litforge(
                build_cfg(case, extra), count_window=((window[0], 0, max(1, window[2] // 8)) if grouped else window)
            ).calls_per_step
    for n in steps_per_call:  # from the first batch of epoch 1, over about as many optimizer steps as the others
        per_call = 8 if n == "auto" else int(n)  # auto: a window of about as many steps as N=8 (N is logged)
        calls[f"litforge, steps_per_call={n}"] = run_litforge(
            build_cfg(case, [f"steps_per_call={n}"]), count_window=(window[0], 0, max(1, window[2] // per_call))
        ).calls_per_step

    if switches:
        for name, extra in SWITCHES.items():
            calls[f"litforge, {name}"] = run_litforge(build_cfg(case, extra), count_window=window).calls_per_step

    plain_steps = [r.step_time() for r in runs["plain"]]
    plain_epochs = [r.epoch_time() for r in runs["plain"]]
    recorded_epochs = [r.epoch_time() for r in runs["plain + records"]]
    default_steps = [r.step_time() for r in runs["litforge"]]
    rows = []
    for name, recs in runs.items():
        steps = [r.step_time() for r in recs]
        epochs = [r.epoch_time() for r in recs]
        rows.append(
            [
                case,
                name,
                f"{median(steps) * 1e3:.2f}",
                f"{median([s / p for s, p in zip(steps, plain_steps, strict=True)]):.3f}",
                f"{median([s / d for s, d in zip(steps, default_steps, strict=True)]):.3f}",
                f"{median(epochs) * 1e3:.0f}",
                f"{median([e / p for e, p in zip(epochs, plain_epochs, strict=True)]):.3f}",
                f"{median([e / p for e, p in zip(epochs, recorded_epochs, strict=True)]):.3f}",
                f"{calls[name]:.0f}",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, set equally in both arms")
    parser.add_argument("--variants", action="store_true", help="also time litforge with single parts switched off")
    parser.add_argument(
        "--switches",
        action="store_true",
        help="also time each one-key speed switch (compile, bf16, channels_last, on_device, ema)",
    )
    parser.add_argument(
        "--steps-per-call",
        nargs="*",
        default=["8"],
        help="also time litforge with steps_per_call=N (N optimizer steps per Lightning step, or auto)",
    )
    args = parser.parse_args()
    quiet()
    rows = []
    for case in args.cases:
        rows += measure(case, args.repeats, args.threads, args.variants, args.steps_per_call, args.switches)
    print_table(
        f"Step overhead (torch threads={args.threads}, median of {args.repeats} interleaved repeats)",
        [
            "case",
            "loop",
            "ms/step",
            "step ratio",
            "× litforge default",
            "ms/epoch (+val, ckpt)",
            "epoch ratio",
            "epoch ratio vs plain + records",
            "py calls/step",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
