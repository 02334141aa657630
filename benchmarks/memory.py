"""Activation checkpointing: peak activation memory and step time of the GPT, with and without it.

    python benchmarks/memory.py                      # GPT depth 8, block 256, dim 128, batch 16; 3 interleaved repeats
    python benchmarks/memory.py --repeats 5 --batch 32

Each measurement is a fresh process (`--worker MODE`) that builds the net and AdamW, takes one warm-up step (which
allocates the gradients and the optimizer state), then measures one training step (forward, backward, optimizer
step) for memory and `--steps` more for time. Arms run interleaved (none, selective, full, none, ...); the table
shows medians and the median of per-repeat ratios to `none`.

How memory is measured on CPU: tracemalloc does not see torch's allocator, and torch's memory statistics exist
for CUDA only. So each worker reads the kernel's resident-set counters: after the warm-up it frees the gradients,
returns free heap pages to the kernel (glibc `malloc_trim`), reads VmRSS (the resting state: weights, optimizer
state, the Python heap), resets the peak (`echo 5 > /proc/self/clear_refs`), runs the step and reads VmHWM (the peak
resident set since the reset). Peak step memory = VmHWM - resting VmRSS; peak activation memory = that minus the
gradients (one copy of the parameter bytes), which are allocated during backward whether or not activations are
recomputed. The worker runs with `MALLOC_MMAP_THRESHOLD_=65536`: every buffer above 64 KiB is its own mapping,
unmapped when torch frees it, so the resident set follows live tensor memory instead of glibc's retained heap. A
cross-check that needs no kernel counters: the bytes autograd saves for backward (distinct storages seen by
`torch.autograd.graph.saved_tensors_hooks`) in the `none` arm, printed under the table.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("none", "selective", "full")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def worker(mode: str, args: argparse.Namespace) -> dict[str, float]:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "src"))
    from litforge.models.gpt import GPT
    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = GPT(vocab_size=args.vocab, block_size=args.block, dim=args.dim, depth=args.depth, heads=args.heads)
    holder = torch.nn.Module()
    holder.net = net
    apply_activation_checkpointing(holder, mode)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    idx = torch.randint(0, args.vocab, (args.batch, args.block + 1), generator=torch.Generator().manual_seed(1))

    def step() -> None:
        logits = net(idx[:, :-1])
        F.cross_entropy(logits.reshape(-1, args.vocab), idx[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: gradients and AdamW state allocated once
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc_trim(0)
    resting = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    step()
    peak = _status_kib("VmHWM")
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    out = {"peak_step_mb": (peak - resting) / 1024, "grad_mb": param_bytes / 2**20,
           "step_s": statistics.median(times)}
    if mode == "none":
        out["saved_mb"] = saved_for_backward(net, idx, args.vocab) / 2**20
    return out


def saved_for_backward(net, idx, vocab: int) -> int:  # type: ignore[no-untyped-def]
    """Bytes of the distinct storages autograd keeps for backward in one forward pass (no recompute involved)."""
    import torch
    import torch.nn.functional as F

    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = net(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))
    del loss, logits
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=65)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    passed = sys.argv[1:]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(args.threads)}
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(args.repeats):
        for mode in MODES:  # interleaved, so machine load moves every arm alike
            out = subprocess.run([sys.executable, __file__, *passed, "--worker", mode], env=env, check=True,
                                 capture_output=True, text=True).stdout
            results[mode].append(json.loads(out.strip().splitlines()[-1]))

    print(f"GPT depth {args.depth}, block {args.block}, dim {args.dim}, batch {args.batch}, {args.threads} thread(s), "
          f"{args.repeats} repeats (medians)")
    print("| activation_checkpointing | peak activation MB | vs none | step s | vs none |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        act = [r["peak_step_mb"] - r["grad_mb"] for r in results[mode]]
        base_act = [r["peak_step_mb"] - r["grad_mb"] for r in results["none"]]
        steps = [r["step_s"] for r in results[mode]]
        base_steps = [r["step_s"] for r in results["none"]]
        act_ratio = statistics.median(a / b for a, b in zip(act, base_act))
        step_ratio = statistics.median(s / b for s, b in zip(steps, base_steps))
        print(f"| {mode} | {statistics.median(act):.0f} | {act_ratio:.2f} | {statistics.median(steps):.3f} | "
              f"{step_ratio:.2f} |")
    saved = statistics.median(r["saved_mb"] for r in results["none"])
    print(f"gradients (included in the peak, subtracted above): {results['none'][0]['grad_mb']:.1f} MB; autograd "
          f"saves {saved:.0f} MB for backward without checkpointing")


if __name__ == "__main__":
    main()
