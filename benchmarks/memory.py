"""Activation checkpointing: peak activation memory and step time of the GPT, with and without it; and (`--strategies`)
bytes per rank under each distributed strategy, with the largest depth that fits a per-rank budget.

    python benchmarks/memory.py                      # GPT depth 8, block 256, dim 128, batch 16; 3 interleaved repeats
    python benchmarks/memory.py --repeats 5 --batch 32
    python benchmarks/memory.py --strategies         # depths 2 4 8 16 x ddp, fsdp, fsdp+AC full, fsdp+bf16, pipeline
    python benchmarks/memory.py --strategies --budget-mb 512 --depths 2 4 8

`--strategies`: per (arm, depth), `--world` (2) fresh gloo CPU rank processes (`--rank-worker`) build the GPT
(dim/block/heads fixed, depth varied) as litforge's strategy does (DDP's wrapper; litforge.parallel.plans.apply_fsdp
with strategy=fsdp's defaults, `activation_checkpointing=full`, or `strategy.mixed_precision=bf16`'s policy;
strategy=pipeline's split_net + PipelineLoop with 1F1B over 2 stages), take a warm-up step, then count exactly the
parameter, gradient and AdamW-state bytes each rank holds (DTensor local shards; a pipeline stage's gradients and
state) and measure one step's peak transient bytes as below (activations, plus FSDP's all-gathered weights and
unsharded gradients, gloo and optimizer temporaries). The global batch is the same in every arm: halved per rank
under ddp/fsdp, whole (in micro-batches) on each pipeline stage. The largest depth that fits `--budget-mb` comes
from a least-squares line in depth through the measured totals of the fullest rank, marked "extrapolated" when it
lies beyond the deepest measured point.

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
from typing import Any

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
    apply_activation_checkpointing(net, mode)
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
    out = {"peak_step_mb": (peak - resting) / 1024, "grad_mb": param_bytes / 2**20, "step_s": statistics.median(times)}
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


# ---- --strategies: bytes per rank under ddp, fsdp, fsdp + checkpointing, fsdp + bf16, pipeline ----------------------
ARMS = ("ddp", "fsdp", "fsdp_ac_full", "fsdp_bf16", "pipeline", "tp", "fsdp_tp", "hsdp")
MESH_ARMS = ("tp", "fsdp_tp", "hsdp")  # through litforge.parallel.plans.shard on Lightning's (data, tensor) mesh


def _local_bytes(tensors: Any) -> int:
    """Bytes of the tensors as this rank holds them: a DTensor's local shard only."""
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def rank_worker(arm: str, rank: int, args: argparse.Namespace) -> dict[str, Any]:
    """One gloo rank of one arm at `args.depth`, in a process group of its own (see `measure_rank`)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.world)
    try:
        return measure_rank(arm, rank, args)
    finally:
        dist.destroy_process_group()


def measure_rank(arm: str, rank: int, args: argparse.Namespace) -> dict[str, Any]:
    """One rank of one arm at `args.depth` in the initialised gloo group of `args.world` ranks (also warm test ranks,
    tests/test_dry_run.py): exact state bytes (counted from the tensors this rank holds), the step's peak transient
    bytes (VmHWM - resting VmRSS - the gradients the step allocates, as `worker` measures), and the payload of each
    collective of one more step, by kind."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "src"))
    from litforge.models.gpt import GPT
    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing

    world = args.world
    if arm == "pipeline":  # imported before the baseline, so the build peak is the net's, not Lightning's import
        from litforge.loops.pipeline import PipelineLoop
        from litforge.models.meta import meta_nets
        from litforge.parallel.meta_init import materialize
        from litforge.parallel.pipeline import net_inputs
        from litforge.parallel.pipeline_split import split_net
        from litforge.tasks.language_model import LanguageModelTask
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from litforge.parallel.plans import apply_fsdp, shard
    from litforge.parallel.dry_run import step_counter  # counts each collective's payload (works on gloo too)

    libc = ctypes.CDLL("libc.so.6")
    idx = torch.randint(0, args.vocab, (args.batch, args.block + 1), generator=torch.Generator().manual_seed(1))
    libc.malloc_trim(0)
    before_build = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    torch.manual_seed(0)
    stage_params: list[Any] | None = None
    if arm == "pipeline":  # litforge's own path: the task, split_net, PipelineLoop (1F1B), as Pipeline._install does
        with meta_nets(args.pipeline_meta_init):  # strategy.meta_init (default true): only this rank's stage is built
            task = LanguageModelTask(
                net={
                    "_target_": "litforge.models.gpt.GPT",
                    "_partial_": True,
                    "dim": args.dim,
                    "depth": args.depth,
                    "heads": args.heads,
                },
                optimizer={"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
                vocab_size=args.vocab,
                block_size=args.block,
                packed=False,
            )
        net = task.net
        stages = split_net(net, world)
        stage = stages[rank]
        if args.pipeline_meta_init:  # as Pipeline.model_to_device: storage and values for this stage only
            materialize(net, "cpu", keep=[*stage.parameters(), *stage.buffers()])
        tied = [p for p in stage.parameters() if sum(any(p is q for q in s.parameters()) for s in stages) > 1]
        holders = [0, world - 1]  # the tied embedding/head: first and last stage, as Pipeline._install groups them
        tied_group = dist.new_group(holders)  # a collective: every rank takes part
        loop = PipelineLoop(
            task,
            stage,
            rank,
            world,
            "1f1b",
            args.microbatches,
            group=None,
            stage_ranks=list(range(world)),
            tied=tied,
            tied_group=tied_group if rank in holders else None,
            device=torch.device("cpu"),
            net_inputs=net_inputs(task),
        )
        optimizer = task.configure_optimizers()  # over the whole net, as under Lightning: state only where grads are
        stage_params = list(stage.parameters())
        batch = (idx[:, :-1], idx[:, 1:], None)

        def step() -> None:
            loop.run(batch, train=True)
            loop.sum_tied_gradients()
            optimizer.step()
    else:
        net = GPT(vocab_size=args.vocab, block_size=args.block, dim=args.dim, depth=args.depth, heads=args.heads)
        replicas, replica = world, rank  # data-parallel ranks: each its share of the global batch
        ddp_buckets: list[int] = []
        if arm == "ddp":
            model: Any = torch.nn.parallel.DistributedDataParallel(net)  # Lightning's DDPStrategy defaults
            model.register_comm_hook(ddp_buckets, _counting_allreduce_hook)  # its reducer's all-reduces, counted
        elif arm in MESH_ARMS:  # the mesh Lightning's ModelParallelStrategy builds, sharded as a task shards its net
            tp = {"tp": world, "fsdp_tp": 2, "hsdp": 1}[arm]
            mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("data_parallel", "tensor_parallel"))
            shard(net, mesh, {"reshard_after_forward": True, **({"replicate_size": 2} if arm == "hsdp" else {})})
            replicas, replica = world // tp, rank // tp
            model = net
        else:
            apply_activation_checkpointing(net, "full" if arm == "fsdp_ac_full" else "none")
            kwargs: dict[str, Any] = {"reshard_after_forward": True}  # litforge's strategy=fsdp defaults
            if arm == "fsdp_bf16":  # what strategy.mixed_precision=bf16 passes (ModelParallel.fsdp_kwargs)
                kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            apply_fsdp(net, init_device_mesh("cpu", (world,)), **kwargs)
            model = net
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        local = idx.chunk(replicas)[replica]  # data parallel: each rank its share of the same global batch

        def step() -> None:
            logits = model(local[:, :-1])
            F.cross_entropy(logits.reshape(-1, args.vocab), local[:, 1:].reshape(-1)).backward()
            optimizer.step()

    build_peak = _status_kib("VmHWM") - before_build

    step()  # warm-up: gradients and AdamW state allocated once
    params = [p for p in net.parameters() if not p.is_meta]  # pipeline with meta init: other stages hold no data
    grads = [p.grad for p in params if p.grad is not None]
    grad_bytes = _local_bytes(grads)
    optim_bytes = _local_bytes(
        v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    del grads
    optimizer.zero_grad(set_to_none=True)
    dist.barrier()
    libc.malloc_trim(0)
    resting = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    step()
    peak = _status_kib("VmHWM")
    dist.barrier()
    counter = step_counter()  # one more step, its collectives counted (outside the memory measurement)
    if arm not in ("pipeline",):
        del ddp_buckets[:]
    with counter:
        step()
    comms = {kind: {"calls": c.calls, "payload": c.payload, "sent": c.sent} for kind, c in counter.comms.items()}
    if arm == "ddp":
        comms["all_reduce"] = {"calls": len(ddp_buckets), "payload": sum(ddp_buckets), "sent": None}
    dist.barrier()
    mb = 2**20
    return {
        "rank": rank,
        "param_mb": _local_bytes(params) / mb,
        "grad_mb": grad_bytes / mb,
        "optim_mb": optim_bytes / mb,
        "transient_mb": (peak - resting) / 1024 - grad_bytes / mb,
        "stage_param_mb": _local_bytes(stage_params) / mb if stage_params is not None else None,
        "resting_state_mb": (resting - before_build) / 1024,
        "build_peak_mb": build_peak / 1024,
        "param_bytes": _local_bytes(params),
        "grad_bytes": grad_bytes,
        "optim_bytes": optim_bytes,
        "local_batch": int(local.shape[0]) if arm != "pipeline" else args.batch,
        "comms": comms,
    }


def _counting_allreduce_hook(buckets, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations
    """DDP's default all-reduce of a gradient bucket, its bytes noted (DDP reduces in C++, outside dispatch modes)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    buffer = bucket.buffer()
    buckets.append(buffer.numel() * buffer.element_size())
    return allreduce_hook(None, bucket)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_arm(arm: str, depth: int, args: argparse.Namespace, env: dict[str, str]) -> list[dict[str, Any]]:
    """`args.world` fresh rank processes of one arm at one depth; their records, by rank."""
    port = str(_free_port())
    common = [
        sys.executable,
        __file__,
        "--rank-worker",
        arm,
        "--depth",
        str(depth),
        "--port",
        port,
        "--world",
        str(args.world),
        "--block",
        str(args.block),
        "--dim",
        str(args.dim),
        "--heads",
        str(args.heads),
        "--vocab",
        str(args.vocab),
        "--batch",
        str(args.batch),
        "--microbatches",
        str(args.microbatches),
        "--threads",
        str(args.threads),
        *(["--pipeline-whole-net"] if not args.pipeline_meta_init else []),
    ]
    import tempfile

    records = []
    with tempfile.TemporaryDirectory() as tmp:  # files, not pipes: a rank never blocks on a full pipe while we wait
        logs = [Path(tmp) / f"rank{r}.txt" for r in range(args.world)]
        procs = []
        for r, log in enumerate(logs):
            with log.open("w") as handle:
                procs.append(
                    subprocess.Popen([*common, "--rank", str(r)], env=env, stdout=handle, stderr=subprocess.STDOUT)
                )
        for proc, log in zip(procs, logs, strict=True):
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:  # a hung collective: stop every rank of this arm, say which
                for other in procs:
                    other.kill()
                raise RuntimeError(f"{arm} depth {depth}: a rank ran past 600 s:\n{log.read_text()[-3000:]}") from None
            text = log.read_text()
            if proc.returncode:
                raise RuntimeError(f"{arm} depth {depth} rank failed:\n{text[-3000:]}")
            records.append(json.loads(text.strip().splitlines()[-1]))
    return records


def total_mb(record: dict[str, Any], stage_only: bool = False) -> float:
    """A rank's bytes for one step: parameters (held) + gradients + optimizer state + peak transient."""
    params = record["stage_param_mb"] if stage_only else record["param_mb"]
    return float(params + record["grad_mb"] + record["optim_mb"] + record["transient_mb"])


def largest_depth(depths: list[int], totals: list[float], budget: float) -> tuple[int, bool]:
    """The largest depth whose per-rank total fits `budget`, on the least-squares line total = a + b * depth through
    the measured points (memory is linear in depth at fixed dim/block/batch); and whether that lies beyond them."""
    n = len(depths)
    mean_d, mean_t = sum(depths) / n, sum(totals) / n
    slope = sum((d - mean_d) * (t - mean_t) for d, t in zip(depths, totals, strict=True)) / sum(
        (d - mean_d) ** 2 for d in depths
    )
    intercept = mean_t - slope * mean_d
    fit = int((budget - intercept) // slope) if slope > 0 else 10**9
    return max(fit, 0), fit > max(depths)


def strategies_main(args: argparse.Namespace) -> None:
    if len(set(args.depths)) < 2:
        raise SystemExit(
            f"--depths {' '.join(map(str, args.depths))}: the fit in depth needs at least two different "
            "depths, e.g. --depths 2 4 8 16"
        )
    env = {
        **os.environ,
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "OMP_NUM_THREADS": str(args.threads),
        "PYTHONPATH": str(ROOT / "src"),
    }
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    results: dict[tuple[str, int], list[list[dict[str, Any]]]] = {}
    for _ in range(args.repeats):
        for depth in args.depths:
            for arm in args.arms:  # interleaved, so machine load moves every arm alike
                results.setdefault((arm, depth), []).append(run_arm(arm, depth, args, env))
    wall = time.perf_counter() - started

    def med(arm: str, depth: int, key: str, stage_only: bool = False) -> float:
        """Median over repeats of the worst rank's value (a per-rank budget is decided by the fullest rank)."""
        per_repeat = [
            max(total_mb(r, stage_only) if key == "total" else r[key] for r in ranks) for ranks in results[(arm, depth)]
        ]
        return statistics.median(per_repeat)

    rows = [(arm, arm, False) for arm in args.arms]
    if "pipeline" in args.arms:
        rows.append(("pipeline", "pipeline, stage params only", True))
    print(
        f"GPT dim {args.dim}, heads {args.heads}, block {args.block}, vocab {args.vocab}, global batch {args.batch} "
        f"({args.batch // args.world} per rank under ddp/fsdp; pipeline: the whole batch in {args.microbatches} "
        f"micro-batches, 1F1B), AdamW, {args.world} gloo CPU ranks x {args.threads} thread(s), "
        f"{args.repeats} repeat(s); load average {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
        f"{wall:.0f} s"
    )
    print(
        f"MB per rank (the fullest rank) = parameters + gradients + optimizer state + peak transient; largest depth "
        f"under --budget-mb {args.budget_mb:g}"
    )
    print("| arm | " + " | ".join(f"depth {d}" for d in args.depths) + " | largest depth that fits |")
    print("|---|" + "---|" * (len(args.depths) + 1))
    for arm, label, stage_only in rows:
        totals = [med(arm, d, "total", stage_only) for d in args.depths]
        fits, beyond = largest_depth(list(args.depths), totals, args.budget_mb)
        note = " (extrapolated)" if beyond else ""
        print(f"| {label} | " + " | ".join(f"{t:.1f}" for t in totals) + f" | {fits}{note} |")
    depth = max(args.depths)
    print(
        f"\nAt depth {depth}, MB on the fullest rank: counted exactly from the tensors it holds (local shards "
        "under fsdp), transient from VmHWM"
    )
    print(
        "| arm | parameters held | of which trained here | gradients | optimizer state | peak transient | "
        "resident at rest, measured | build peak |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for arm in args.arms:
        stage = med(arm, depth, "stage_param_mb") if arm == "pipeline" else med(arm, depth, "param_mb")
        print(
            f"| {arm} | {med(arm, depth, 'param_mb'):.1f} | {stage:.1f} | {med(arm, depth, 'grad_mb'):.1f} | "
            f"{med(arm, depth, 'optim_mb'):.1f} | {med(arm, depth, 'transient_mb'):.1f} | "
            f"{med(arm, depth, 'resting_state_mb'):.1f} | {med(arm, depth, 'build_peak_mb'):.1f} |"
        )


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
    parser.add_argument("--repeats", type=int, default=None, help="default: 3 (1 with --strategies)")
    parser.add_argument(
        "--strategies",
        action="store_true",
        help="bytes per rank under ddp, fsdp, fsdp + checkpointing, fsdp + bf16, pipeline",
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16], help="with --strategies")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="with --strategies")
    parser.add_argument("--budget-mb", type=float, default=256.0, help="per-rank budget, with --strategies")
    parser.add_argument("--world", type=int, default=2, help="gloo CPU ranks, with --strategies")
    parser.add_argument("--microbatches", type=int, default=4, help="pipeline micro-batches, with --strategies")
    parser.add_argument(
        "--pipeline-whole-net",
        dest="pipeline_meta_init",
        action="store_false",
        help="pipeline arm: every rank builds the whole net (strategy.meta_init=false); default: its own stage only",
    )
    parser.add_argument("--rank-worker", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    if args.rank_worker:
        print(json.dumps(rank_worker(args.rank_worker, args.rank, args)))
        return
    if args.repeats is None:
        args.repeats = 1 if args.strategies else 3
    if args.strategies:
        strategies_main(args)
        return

    passed = sys.argv[1:]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(args.threads)}
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(args.repeats):
        for mode in MODES:  # interleaved, so machine load moves every arm alike
            out = subprocess.run(
                [sys.executable, __file__, *passed, "--worker", mode],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[mode].append(json.loads(out.strip().splitlines()[-1]))

    print(
        f"GPT depth {args.depth}, block {args.block}, dim {args.dim}, batch {args.batch}, {args.threads} thread(s), "
        f"{args.repeats} repeats (medians)"
    )
    print("| activation_checkpointing | peak activation MB | vs none | step s | vs none |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        act = [r["peak_step_mb"] - r["grad_mb"] for r in results[mode]]
        base_act = [r["peak_step_mb"] - r["grad_mb"] for r in results["none"]]
        steps = [r["step_s"] for r in results[mode]]
        base_steps = [r["step_s"] for r in results["none"]]
        act_ratio = statistics.median(a / b for a, b in zip(act, base_act, strict=True))
        step_ratio = statistics.median(s / b for s, b in zip(steps, base_steps, strict=True))
        print(
            f"| {mode} | {statistics.median(act):.0f} | {act_ratio:.2f} | {statistics.median(steps):.3f} | "
            f"{step_ratio:.2f} |"
        )
    saved = statistics.median(r["saved_mb"] for r in results["none"])
    print(
        f"gradients (included in the peak, subtracted above): {results['none'][0]['grad_mb']:.1f} MB; autograd "
        f"saves {saved:.0f} MB for backward without checkpointing"
    )


if __name__ == "__main__":
    main()
