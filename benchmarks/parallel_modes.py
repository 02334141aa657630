"""Parallel modes on 2 CPU processes: sync DDP, local SGD, DiLoCo (H = 8, 32) and Hogwild, on the digits MLP and
the character GPT, with and without an artificial delay on every collective (a slow link).

    python benchmarks/parallel_modes.py                       # both models, delays 0 and 5 ms, 1 seed
    python benchmarks/parallel_modes.py --seeds 0 1 2 --models mlp --delays-ms 0 5 --out table.md

Each arm is the real CLI (`python train.py strategy=<mode> trainer.devices=2 ...`, Lightning re-runs it for rank 1)
with a probe callback (:class:`Probe`, added with `+callbacks.probe._target_=parallel_modes.Probe`) that on every
rank, at the start of training:

- wraps `torch.distributed`'s collectives (all_reduce, broadcast, all_gather(_object), reduce, barrier) so that each
  one first sleeps `delay_ms` and counts the bytes of the tensors it sends; under sync DDP (whose gradient all-reduce
  runs inside DDP's C++ reducer, not through those functions) it registers torch's default DDP communication hook,
  the same all-reduce per gradient bucket but through `dist.all_reduce`. The benchmark process only: litforge
  itself is untouched.
- records on rank 0 the wall time since the start of training at every validation and the validation metric.

Reported per arm: wall time from the start of training to the first validation at the target metric, bytes rank 0
sent per optimizer step (all collectives, the per-step SIGTERM-flag broadcast included), and the final validation
metric; mean ± spread over the seeds. Hogwild's workers exchange weights through shared memory, not the link.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "ddp": ["strategy=ddp"],
    "local_sgd": ["strategy=local_sgd"],  # period 4
    "diloco_h8": ["strategy=diloco", "strategy.sync_every=8"],
    "diloco_h32": ["strategy=diloco", "strategy.sync_every=32"],
    "hogwild": ["strategy=hogwild"],
}
MODELS = {  # overrides, the metric, its target, and "max" / "min"
    "mlp": (["trainer=cpu", "trainer.max_epochs=6"], "val/acc", 0.93, "max"),
    "gpt": (
        [
            "experiment=gpt_char",
            "trainer.max_steps=80",
            "trainer.val_check_interval=20",
            "trainer.limit_val_batches=4",
            "callbacks.text_samples=null",
        ],
        "val/loss",
        2.9,
        "min",
    ),
}
COMMON = [
    "trainer.devices=2",
    "logger=csv",
    "print_config=false",
    "callbacks.progress_bar=null",
    "callbacks.model_summary=null",
    "callbacks.early_stopping=null",
    "test_after_training=false",
    "trainer.num_sanity_val_steps=0",
]


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


try:
    import pytorch_lightning as pl

    class Probe(pl.Callback):
        """Delay + count every collective of this rank; rank 0 writes validation times and metrics to `out`."""

        def __init__(self, out: str, metric: str, delay_ms: float = 0.0) -> None:
            self.out, self.metric, self.delay = out, metric, delay_ms / 1000
            self.sent = 0
            self.start = 0.0
            self.points: list[tuple[float, float]] = []

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            import torch.distributed as dist
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            from torch.nn.parallel import DistributedDataParallel

            probe = self

            def wrap(fn: Any, payload: Any) -> Any:
                def slow(*args: Any, **kwargs: Any) -> Any:
                    if probe.delay:
                        time.sleep(probe.delay)
                    probe.sent += payload(args)
                    return fn(*args, **kwargs)

                return slow

            for name in ("all_reduce", "broadcast", "reduce", "all_gather"):
                setattr(dist, name, wrap(getattr(dist, name), lambda a: _nbytes(a[0]) if a else 0))
            for name in ("barrier", "all_gather_object", "broadcast_object_list"):
                setattr(dist, name, wrap(getattr(dist, name), lambda a: 0))
            model = trainer.strategy.model
            if isinstance(model, DistributedDataParallel) and type(trainer.strategy).__name__ == "DDPStrategy":
                # torch's default hook is DDP's own all-reduce, but through `dist.all_reduce` (wrapped above),
                # one call per gradient bucket, instead of inside the C++ reducer
                model.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
            self.start = time.perf_counter()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking or trainer.state.fn != "fit":
                return
            value = trainer.callback_metrics.get(self.metric)
            if value is not None:
                self.points.append((time.perf_counter() - self.start, float(value)))

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.global_rank == 0:
                Path(self.out).write_text(
                    json.dumps({"points": self.points, "sent": self.sent, "steps": trainer.global_step})
                )
except ImportError:  # the table-only path needs no Lightning
    pass


def run_arm(mode: str, model: str, seed: int, delay_ms: float, folder: Path) -> dict[str, Any]:
    overrides, metric, _, _ = MODELS[model]
    out = folder / f"{model}-{mode}-{delay_ms:g}ms-seed{seed}.json"
    command = [
        sys.executable,
        "train.py",
        *overrides,
        *MODES[mode],
        *COMMON,
        f"seed={seed}",
        f"paths.log_dir={folder / 'logs'}",
        "+callbacks.probe._target_=parallel_modes.Probe",
        f"+callbacks.probe.out={out}",
        f"+callbacks.probe.metric={metric}",
        f"+callbacks.probe.delay_ms={delay_ms}",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"{mode} {model} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def summarize(result: dict[str, Any], model: str) -> dict[str, Any]:
    _, _, target, mode = MODELS[model]
    reached = next((t for t, v in result["points"] if (v >= target if mode == "max" else v <= target)), None)
    return {
        "time_to_target_s": reached,
        "bytes_per_step": result["sent"] / max(result["steps"], 1),
        "final": result["points"][-1][1] if result["points"] else None,
    }


def _cell(values: list[Any], fmt: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "not reached"
    mean = statistics.mean(values)
    spread = f" ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else ""
    return f"{mean:{fmt}}{spread}"


def table(rows: dict[tuple[str, str, float], list[dict[str, Any]]], seeds: int) -> str:
    lines = [
        "| model | link delay | mode | time to target (s) | bytes / step / rank | final metric |",
        "|---|---|---|---|---|---|",
    ]
    for (model, mode, delay), runs in rows.items():
        _, metric, target, direction = MODELS[model]
        reached = [r["time_to_target_s"] for r in runs]
        missed = sum(r is None for r in reached)
        when = _cell(reached, ".1f") + (f" ({missed}/{len(runs)} not reached)" if missed and missed < len(runs) else "")
        lines.append(
            f"| {model} ({metric} {'≥' if direction == 'max' else '≤'} {target}) | {delay:g} ms | {mode} | "
            f"{when} | {_cell([r['bytes_per_step'] for r in runs], ',.0f')} | "
            f"{_cell([r['final'] for r in runs], '.3f')} |"
        )
    return "\n".join(lines) + f"\n\n{seeds} seed(s) per row.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--delays-ms", nargs="+", type=float, default=[0.0, 5.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args()
    rows: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="litforge-modes-") as tmp:
        for model in args.models:
            for delay in args.delays_ms:
                for mode in args.modes:
                    for seed in args.seeds:
                        started = time.perf_counter()
                        summary = summarize(run_arm(mode, model, seed, delay, Path(tmp)), model)
                        rows.setdefault((model, mode, delay), []).append(summary)
                        print(
                            f"{model} {mode} {delay:g}ms seed {seed}: {summary} "
                            f"({time.perf_counter() - started:.0f} s)",
                            flush=True,
                        )
    text = table(rows, len(args.seeds))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
