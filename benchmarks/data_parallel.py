"""Data parallel on CPU (gloo): DDP 2 processes × 1 thread vs 1 process × 2 threads, samples/s; FSDP2 per-rank
model-state bytes vs DDP.

    python benchmarks/data_parallel.py

Throughput: litforge's own loop on the CNN (CIFAR-shaped in-memory data) at the same global batch (1 × 128 vs
2 × 64, which the in-memory loader makes the same global batches), timed inside epochs on rank 0.
Memory: after training, each rank's bytes of parameters + gradients + optimizer state (AdamW) for the digits MLP,
under Lightning's `strategy="ddp"` and under `ModelParallelStrategy` with FSDP2's `fully_shard` (a local shard of
each DTensor). Strategies are built here directly (conf/strategy/ options come from the strategies work).
Lightning's DDP launcher re-runs this script for rank 1 with the same arguments: each arm is its own subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

ARMS = ("single", "ddp", "ddp_bytes", "fsdp_bytes")


def state_bytes(module: Any, optimizer: Any) -> int:
    """Bytes this rank holds for parameters, gradients and optimizer state (local shards for DTensors)."""
    import torch

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    total = 0
    for p in module.parameters():
        total += local(p).numel() * p.element_size()
        if p.grad is not None:
            total += local(p.grad).numel() * p.grad.element_size()
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                total += local(value).numel() * value.element_size()
    return total


def run_arm(arm: str, out: str) -> None:
    import torch
    from omegaconf import OmegaConf, open_dict
    from pytorch_lightning.callbacks import Callback

    import common  # noqa: F401
    from common import compose, quiet, run_litforge, synthetic_data_cfg

    quiet()
    torch.set_num_threads(2 if arm == "single" else 1)
    if arm in ("single", "ddp"):
        devices = 1 if arm == "single" else 2
        cfg = compose(
            "model=cnn",
            "trainer=cpu",
            f"trainer.devices={devices}",
            "trainer.max_epochs=3",
            "trainer.num_sanity_val_steps=0",
            "callbacks.model_checkpoint=null",
            output_dir=os.environ["BENCH_OUTPUT_DIR"],
        )
        with open_dict(cfg):
            cfg.data = OmegaConf.create(synthetic_data_cfg((3, 32, 32), train_size=128 * 12, batch_size=128 // devices))
            cfg.strategy = {"name": "ddp" if devices > 1 else "auto"}
        rec = run_litforge(cfg)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            with open(out, "w") as f:
                json.dump({"samples_per_s": 128 / rec.step_time(), "threads": torch.get_num_threads()}, f)
        return

    measured: dict[str, int] = {}

    class MeasureState(Callback):
        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            # gradients present; AdamW state present from the second step on (the last step's count is kept)
            measured["bytes"] = state_bytes(pl_module, optimizer)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            # Lightning 2.6 broadcasts a SIGTERM flag from rank 0 before every DDP training step (#21487); on GPUs its
            # `.item()` is a host sync. Here (gloo, CPU) only the collective's own latency can be measured.
            import time

            broadcast = trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor
            broadcast()
            start = time.perf_counter()
            for _ in range(200):
                broadcast()
            measured["sigterm_broadcast_us"] = (time.perf_counter() - start) / 200 * 1e6

    cfg = compose(
        "trainer=cpu",
        "trainer.devices=2",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
        "trainer.limit_val_batches=1",
        "trainer.num_sanity_val_steps=0",
        "callbacks=none",
        "trainer.enable_progress_bar=false",
        "model.hidden_dims=[512,512]",
        output_dir=os.environ["BENCH_OUTPUT_DIR"],
    )
    with open_dict(cfg):
        if arm == "fsdp_bytes":
            cfg.strategy = {
                "_target_": "pytorch_lightning.strategies.ModelParallelStrategy",
                "data_parallel_size": 2,
                "tensor_parallel_size": 1,
            }
            cfg.task._target_ = "data_parallel.FullyShardedClassification"
        else:
            cfg.strategy = {"name": "ddp"}
    import litforge.jobs.train as job

    real = job.instantiate_named
    job.instantiate_named = lambda group, node: [MeasureState()] if group == "callbacks" else real(group, node)
    with open_dict(cfg):
        cfg.test_after_training = False
    job.train(cfg)
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(f"{out}.{rank}", "w") as f:
        json.dump(measured, f)


def _sharded_task_class() -> type:
    from litforge.tasks.classification import ClassificationTask

    class FullyShardedClassification(ClassificationTask):
        """The classification task with FSDP2: each Linear its own shard unit, then the whole net."""

        def configure_model(self) -> None:
            if self.device_mesh is None:  # load_from_checkpoint calls this too, with no mesh
                return
            from torch import nn
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            for module in self.net.modules():
                if isinstance(module, nn.Linear):
                    fully_shard(module, mesh=mesh)
            fully_shard(self.net, mesh=mesh)

    return FullyShardedClassification


def __getattr__(name: str) -> Any:  # lazily, so importing this module for the DDP relaunch stays light
    if name == "FullyShardedClassification":
        return _sharded_task_class()
    raise AttributeError(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", choices=ARMS)
    parser.add_argument("--out")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.arm:
        run_arm(args.arm, args.out)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(os.path.dirname(here), "src")
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in range(args.repeats):
        for arm in ARMS[:2] if r % 2 == 0 else reversed(ARMS[:2]):
            results[arm].append(_spawn(arm, here, src))
    for arm in ARMS[2:]:
        results[arm].append(_spawn(arm, here, src, ranks=2))
    import statistics

    single = statistics.median(r["samples_per_s"] for r in results["single"])
    ddp = statistics.median(r["samples_per_s"] for r in results["ddp"])
    print(f"\n### Data parallel on CPU (gloo), CNN, global batch 128, median of {args.repeats}\n")
    print("| run | samples/s | × 1 process |")
    print("|---|---|---|")
    print(f"| 1 process × 2 threads | {single:.0f} | 1.00 |")
    print(f"| DDP 2 processes × 1 thread | {ddp:.0f} | {ddp / single:.2f} |")
    ddp_b = [r["bytes"] for r in results["ddp_bytes"][0]]
    fsdp_b = [r["bytes"] for r in results["fsdp_bytes"][0]]
    print("\n### Model state per rank (params + grads + AdamW state), MLP 64→512→512→10, 2 ranks\n")
    print("| strategy | bytes per rank | × DDP |")
    print("|---|---|---|")
    print(f"| DDP | {ddp_b} | 1.00 |")
    print(f"| FSDP2 (ModelParallelStrategy + fully_shard) | {fsdp_b} | {max(fsdp_b) / max(ddp_b):.2f} |")
    sigterm = [round(r["sigterm_broadcast_us"]) for r in results["ddp_bytes"][0]]
    print(f"\nLightning's per-step SIGTERM-flag broadcast (gloo, 2 ranks): {sigterm} µs per step per rank")


def _spawn(arm: str, here: str, src: str, ranks: int = 1) -> Any:
    out = tempfile.mktemp(suffix=".json")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([here, src, os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "2" if arm == "single" else "1",
        "BENCH_OUTPUT_DIR": tempfile.mkdtemp(prefix="litforge-dp-"),
    }
    subprocess.run(
        [sys.executable, os.path.join(here, "data_parallel.py"), "--arm", arm, "--out", out],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if arm else None,
    )
    if arm.endswith("_bytes"):
        return [json.load(open(f"{out}.{rank}")) for rank in range(ranks)]
    return json.load(open(out))


if __name__ == "__main__":
    main()
