"""`dry_run=true` at scale: the wall time of the 7B x 256-rank example, and the "will it fit" table of
docs/distributed.md (bytes per rank and per step for GPT presets under each strategy, planned on this CPU).

    python benchmarks/dry_run.py                 # the timed example, then the table
    python benchmarks/dry_run.py --table-only    # the table only
    python benchmarks/dry_run.py --budget-gib 80 # "fits" against another per-rank budget (default: an 80 GB GPU)
    python benchmarks/dry_run.py --compare       # dry vs real: 2 gloo ranks per arm (--world 4 --compare fsdp_tp hsdp)

The example is the exact command a user types, in a fresh process (imports included):

    python train.py model=gpt_7b strategy=fsdp_tp trainer.num_nodes=32 trainer.devices=8 \\
        activation_checkpointing=full dry_run=true

Each table row is the train job's own dry run (litforge.parallel.dry_run.dry_run) on a config composed from conf/
with the row's overrides; the row shows the fullest simulated rank: parameters + gradients + optimizer state (AdamW,
fp32) + peak step transient (activations, gathered weights, temporaries), and the bytes it sends per step (ring
algorithms, summed over collective kinds). Batches are each preset's: one row of 2,048 tokens per rank for 1B/7B,
8 rows of 1,024 for the GPT-2 shapes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = [
    "model=gpt_7b",
    "strategy=fsdp_tp",
    "trainer.num_nodes=32",
    "trainer.devices=8",
    "activation_checkpointing=full",
    "dry_run=true",
]
ROWS: list[tuple[str, list[str]]] = [
    ("gpt2_124m, ddp x 8", ["model=gpt2_124m", "strategy=ddp", "trainer.devices=8"]),
    ("gpt2_124m, fsdp x 8", ["model=gpt2_124m", "strategy=fsdp", "trainer.devices=8"]),
    ("gpt2_350m, fsdp x 8, AC full", ["model=gpt2_350m", "strategy=fsdp", "trainer.devices=8", "+ac=full"]),
    ("gpt_1b, ddp x 8", ["model=gpt_1b", "strategy=ddp", "trainer.devices=8"]),
    ("gpt_1b, fsdp x 8", ["model=gpt_1b", "strategy=fsdp", "trainer.devices=8"]),
    (
        "gpt_1b, fsdp bf16 x 8, AC full",
        ["model=gpt_1b", "strategy=fsdp", "strategy.mixed_precision=bf16", "trainer.devices=8", "+ac=full"],
    ),
    ("gpt_1b, pipeline 4 stages", ["model=gpt_1b", "strategy=pipeline", "trainer.devices=4"]),
    ("gpt_7b, ddp x 8", ["model=gpt_7b", "strategy=ddp", "trainer.devices=8"]),
    ("gpt_7b, tp x 8", ["model=gpt_7b", "strategy=tp", "trainer.devices=8"]),
    ("gpt_7b, fsdp x 8, AC full", ["model=gpt_7b", "strategy=fsdp", "trainer.devices=8", "+ac=full"]),
    (
        "gpt_7b, fsdp x 64 (8 nodes), AC full",
        ["model=gpt_7b", "strategy=fsdp", "trainer.devices=8", "trainer.num_nodes=8", "+ac=full"],
    ),
    (
        "gpt_7b, hsdp 8 copies x 8, AC full",
        [
            "model=gpt_7b",
            "strategy=hsdp",
            "strategy.replicate_size=8",
            "trainer.devices=8",
            "trainer.num_nodes=8",
            "+ac=full",
        ],
    ),
    (
        "gpt_7b, fsdp_tp 32 x 8 (32 nodes), AC full",
        [
            "model=gpt_7b",
            "strategy=fsdp_tp",
            "strategy.tensor_parallel_size=8",
            "trainer.devices=8",
            "trainer.num_nodes=32",
            "+ac=full",
        ],
    ),
]


def dry_arm(arm: str, world: int, local_batch: int, sizes: dict[str, int]) -> list[Any]:
    """The dry run of one of benchmarks/memory.py's arms (`--strategies`), at its sizes: each simulated rank's plan."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from litforge.models.meta import meta_nets
    from litforge.parallel.activation_checkpointing import apply_activation_checkpointing
    from litforge.parallel.dry_run import Setup, plan
    from litforge.tasks.language_model import LanguageModelTask

    fsdp: dict[str, Any] = {"reshard_after_forward": True}
    setups = {
        "ddp": Setup(world, "ddp", dp=world),
        "fsdp": Setup(world, "model_parallel", dp=world, fsdp_kwargs=fsdp),
        "fsdp_ac_full": Setup(world, "model_parallel", dp=world, fsdp_kwargs=fsdp),
        "fsdp_bf16": Setup(
            world,
            "model_parallel",
            dp=world,
            fsdp_kwargs={**fsdp, "mp_policy": MixedPrecisionPolicy(torch.bfloat16, reduce_dtype=torch.float32)},
        ),
        "tp": Setup(world, "model_parallel", dp=1, tp=world, fsdp_kwargs=fsdp),
        "fsdp_tp": Setup(world, "model_parallel", dp=world // 2, tp=2, fsdp_kwargs=fsdp),
        "hsdp": Setup(world, "model_parallel", dp=world, fsdp_kwargs={**fsdp, "replicate_size": 2}),
        "pipeline": Setup(world, "pipeline", stages=world, microbatches=sizes["microbatches"], schedule="1f1b"),
    }

    def build() -> Any:
        net = {"_target_": "litforge.models.gpt.GPT", "_partial_": True}
        net.update(dim=sizes["dim"], depth=sizes["depth"], heads=sizes["heads"])
        with meta_nets(True):
            task = LanguageModelTask(
                net=net,
                optimizer={"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
                vocab_size=sizes["vocab"],
                block_size=sizes["block"],
                packed=False,
            )
        apply_activation_checkpointing(task.net, "full" if arm == "fsdp_ac_full" else "none")
        return task

    return plan(build, setups[arm], local_batch, sizes["block"])


def timed_example() -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *EXAMPLE], cwd=ROOT, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"the example failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    print("$ python train.py " + " ".join(EXAMPLE))
    print(proc.stdout[proc.stdout.index("dry run: fsdp_tp") :].rstrip())
    print(f"\nwall time, fresh process: {wall:.1f} s\n")
    return wall


def row_plan(overrides: list[str]) -> tuple[dict[str, Any], float]:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (the resolvers the configs use)
    from litforge.config.settings import Train, job_settings
    from litforge.jobs.build import build_task
    from litforge.parallel.dry_run import dry_run

    plain = [o for o in overrides if not o.startswith("+ac=")]
    plain += [f"activation_checkpointing={o[4:]}" for o in overrides if o.startswith("+ac=")]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*plain, "dry_run=true", "paths.output_dir=."])
    GlobalHydra.instance().clear()
    with contextlib.redirect_stdout(io.StringIO()):
        result = dry_run(
            cfg, job_settings(cfg, Train), build_task, judge=False
        )  # the table only: a row that does not fit is a row, no refusal
    fullest = max(result["dry_run"], key=lambda r: r["total"])
    return fullest, float(result["seconds"])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def table(budget_gib: float) -> None:
    print(
        f"GiB per rank (the fullest simulated rank); sent = bytes it puts on the wire per step; fits = total under "
        f"{budget_gib:g} GiB"
    )
    print("| run | params | grads | optim state | activations | total | sent per step | fits | planned in |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, overrides in ROWS:
        r, seconds = row_plan(overrides)
        sent = sum(c["sent"] for c in r["comms"].values())
        fits = "yes" if r["total"] <= budget_gib * 2**30 else "no"
        print(
            f"| {label} | {gib(r['params'])} | {gib(r['grads'])} | {gib(r['optim'])} | {gib(r['activations'])} | "
            f"{gib(r['total'])} | {gib(sent)} | {fits} | {seconds:.0f} s |",
            flush=True,
        )


COMPARE_SIZES = {"dim": 256, "depth": 4, "heads": 4, "vocab": 65, "block": 256, "batch": 16, "microbatches": 4}


def compare(arms: list[str], world: int) -> None:
    """Each arm's dry run against the same run on `world` real gloo ranks (benchmarks/memory.py), rank 0, MiB."""
    import os

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    args = argparse.Namespace(
        **COMPARE_SIZES, world=world, threads=1, pipeline_meta_init=True
    )  # strategy.meta_init: the default
    print(f"GPT {COMPARE_SIZES}, {world} gloo ranks vs the dry run, rank 0, MiB (real / dry)")
    print("| arm | params | grads | optim state | activations (real: VmHWM transient) | collective payload per step |")
    print("|---|---|---|---|---|---|")
    mib = 2**20
    for arm in arms:
        real = memory.run_arm(arm, COMPARE_SIZES["depth"], args, env)[0]
        dry = dry_arm(arm, world, real["local_batch"], COMPARE_SIZES)[0]
        real_sent = sum(c["payload"] for c in real["comms"].values())
        dry_sent = sum(c.payload for c in dry.comms.values())
        print(
            f"| {arm} | {real['param_bytes'] / mib:.2f} / {dry.params / mib:.2f} | "
            f"{real['grad_bytes'] / mib:.2f} / {dry.grads / mib:.2f} | {real['optim_bytes'] / mib:.2f} / "
            f"{dry.optim / mib:.2f} | {real['transient_mb']:.1f} / {dry.activations / mib:.1f} | "
            f"{real_sent / mib:.2f} / {dry_sent / mib:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--budget-gib", type=float, default=74.5, help="per-rank budget (80 GB = 74.5 GiB)")
    parser.add_argument("--compare", nargs="*", metavar="ARM", help="dry vs real gloo ranks (memory.py's arms)")
    parser.add_argument("--world", type=int, default=2, help="gloo ranks, with --compare")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    if args.compare is not None:
        compare(args.compare or ["ddp", "fsdp", "fsdp_ac_full", "fsdp_bf16", "tp", "pipeline"], args.world)
        return
    if not args.table_only:
        timed_example()
    table(args.budget_gib)


if __name__ == "__main__":
    main()
