"""`compile=blocks` against `compile=true` and eager: compile time and steady step time of the GPT on this CPU.

    python benchmarks/compile_blocks.py --rounds 3 --depth 4

Each measurement is a fresh process (inductor's in-memory caches would otherwise make the second compile free) with
inductor's on-disk caches off (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1), so "compile" is a cold compile as a new run
pays it. Modes are interleaved round by round (eager, true, blocks, eager, ...) so machine load drifts alike on all
three; the table shows medians over rounds. Compile time: the first training step's time less the eager median
step. Step time: the median of `--steps` steady steps after `--warmup`. The net is built and compiled by the same
code a run uses (litforge.models.speed), under `activation_checkpointing` if asked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import common  # noqa: F401  (puts src/ on sys.path)

MODES = ("eager", "true", "blocks")


def one(args: argparse.Namespace) -> dict[str, float]:
    import torch
    from torch import nn

    from litforge.models.gpt import GPT
    from litforge.models.speed import apply_speed_options
    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    task = nn.Module()
    task.net = GPT(vocab_size=256, block_size=args.seq, dim=args.dim, depth=args.depth, heads=4)
    apply_activation_checkpointing(task.net, args.ac)
    compile_value: bool | str = {"eager": False, "true": True, "blocks": "blocks"}[args.mode]
    apply_speed_options(task.net, compile=compile_value)
    opt = torch.optim.AdamW(task.net.parameters(), lr=1e-3)
    idx = torch.randint(0, 256, (args.batch, args.seq))
    tgt = torch.randint(0, 256, (args.batch, args.seq))
    times = []
    for _ in range(1 + args.warmup + args.steps):
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(task.net(idx, None).flatten(0, 1), tgt.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return {"first": times[0], "step": statistics.median(times[1 + args.warmup :]), "loss": loss.item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ac", default="none", help="activation_checkpointing: none | full | selective")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one measurement (child process)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(one(args)))
        return
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    for _ in range(args.rounds):
        for mode in MODES:
            argv = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
            out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
            results[mode].append(json.loads(out.strip().splitlines()[-1]))
    eager_step = statistics.median(r["step"] for r in results["eager"])
    print(
        f"GPT dim={args.dim} depth={args.depth} seq={args.seq} batch={args.batch}, {args.threads} threads, "
        f"activation_checkpointing={args.ac}, {args.rounds} interleaved rounds (medians)"
    )
    print(f"{'compile':8} {'compile s':>10} {'step ms':>8} {'step vs eager':>14} {'compile vs true':>16}")
    compile_true = statistics.median(r["first"] for r in results["true"]) - eager_step
    for mode in MODES:
        step = statistics.median(r["step"] for r in results[mode])
        first = statistics.median(r["first"] for r in results[mode]) - eager_step
        comp = f"{first:10.1f}" if mode != "eager" else f"{'-':>10}"
        vs_true = f"{first / compile_true:15.2f}×" if mode != "eager" else f"{'-':>16}"
        print(f"{mode:8} {comp} {step * 1e3:8.1f} {step / eager_step:13.2f}× {vs_true}")


if __name__ == "__main__":
    main()
