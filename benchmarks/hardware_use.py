"""Hardware use of the CNN: model FLOPs per training step × steps/s ÷ the measured matmul peak, fp32 and bf16.

    python benchmarks/hardware_use.py --threads 2

FLOPs per step: `torch.utils.flop_counter.FlopCounterMode` around one forward + backward of the net on a batch
(the optimizer's elementwise work is not counted: model FLOPs, as in MFU). Steps/s: litforge's own loop
(`python train.py model=cnn ...` on CIFAR-shaped in-memory data, batch 64), timed inside epochs. Peak: the best of
a few 2048×2048 matmuls in the same dtype and thread count. Also shows the speed switches `channels_last=true`
and `trainer.precision=bf16-mixed`.
"""

from __future__ import annotations

import argparse
import time

import torch
from omegaconf import OmegaConf, open_dict
from torch.utils.flop_counter import FlopCounterMode

import common  # noqa: F401  (puts src/ on sys.path)
from common import compose, median, print_table, quiet, run_litforge, synthetic_data_cfg

SHAPE = (3, 32, 32)
BATCH = 64


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def cfg_for(*extra: str):
    cfg = compose("model=cnn", "trainer.max_epochs=3", "trainer.num_sanity_val_steps=0", *extra)
    with open_dict(cfg):
        cfg.data = OmegaConf.create(synthetic_data_cfg(SHAPE, train_size=BATCH * 14, batch_size=BATCH))
    return cfg


def flops_per_step(cfg) -> int:
    from hydra.utils import instantiate

    from litforge.jobs.build import build_task

    dm = instantiate(cfg.data, _convert_="all")
    net = build_task(cfg, dm.describe()).net
    x = torch.randn(BATCH, *SHAPE)
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    flops = flops_per_step(cfg_for())
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    variants = {
        "fp32": ("fp32", []),
        "fp32, channels_last=true": ("fp32", ["channels_last=true"]),
        "bf16-mixed": ("bf16", ["trainer.precision=bf16-mixed"]),
        "bf16-mixed, channels_last=true": ("bf16", ["trainer.precision=bf16-mixed", "channels_last=true"]),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.repeats):
        for name in list(variants) if r % 2 == 0 else list(reversed(variants)):
            torch.set_num_threads(args.threads)
            times[name].append(run_litforge(cfg_for(*variants[name][1])).step_time())
    rows = []
    for name, (dtype, _) in variants.items():
        step = median(times[name])
        achieved = flops / step
        rows.append(
            [
                name,
                f"{step * 1e3:.1f}",
                f"{achieved / 1e9:.1f}",
                f"{peaks[dtype] / 1e9:.1f}",
                f"{achieved / peaks['fp32']:.0%}",
                f"{achieved / peaks[dtype]:.0%}",
            ]
        )
    print_table(
        f"Hardware use, CNN {list(SHAPE)} batch {BATCH}: {flops / 1e9:.2f} GFLOP per step "
        f"(threads={args.threads}, median of {args.repeats})",
        ["run", "ms/step", "GFLOP/s", "matmul peak GFLOP/s (same dtype)", "÷ fp32 peak", "÷ own-dtype peak"],
        rows,
    )


if __name__ == "__main__":
    main()
