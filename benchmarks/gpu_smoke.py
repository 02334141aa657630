"""GPU smoke test: a dozen short runs of the real CLI on one GPU (~6 min), for what CPU tests with gloo cannot see.

    PYTHONPATH=src python benchmarks/gpu_smoke.py            # prints one table row per run; exit 1 if any failed

Each row: the run, its exit code against the expected one, seconds, and for the training runs that count them, the
host syncs per optimizer step (torch.cuda.set_sync_debug_mode("warn") between steps 3 and the end of training,
counted by :class:`SyncCounter`). The runs: the default MLP; the CNN with data.on_device + augment + channels_last;
compile with steps_per_call; deterministic (warn-only on CUDA); exact resume (2+1 epochs = 3 epochs); SIGTERM → 143
then resume=auto; pruning + QAT, then a CPU-only export; single-rank fsdp, then a CPU-only eval; the GPT with text
samples, then generate.py on the GPU; EMA; the DQN. "CPU-only" = CUDA_VISIBLE_DEVICES="" for that command.

Without CUDA it says so in one line and exits 0 (tests/test_gpu_bugs.py checks that). On the lent GPU machine (no
hydra-core, omegaconf or antlr4 there, and no package registry) bring the pure-Python wheels:
`pip download --no-deps -d wheels hydra-core omegaconf antlr4-python3-runtime` here, then there
`pip install --no-deps wheels/*.whl && PYTHONPATH=src python benchmarks/gpu_smoke.py`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

ROOT = Path(__file__).resolve().parents[1]
GPU = ["trainer=gpu", "print_config=false", "callbacks.progress_bar=null", "logger=csv"]
SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=20",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
]
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


class SyncCounter(pl.Callback):
    """Count host syncs per optimizer step with torch's sync debug mode (each sync warns); write them to `out`."""

    def __init__(self, out: str, skip: int = 3) -> None:
        self.out, self.skip, self.syncs, self.steps, self._catch = Path(out), skip, 0, 0, None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        import torch

        if trainer.global_step == self.skip and self._catch is None:  # after warm-up (first compile, allocations)
            self._catch = warnings.catch_warnings(record=True)
            self.records = self._catch.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            self.start_step = trainer.global_step

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import torch

        if self._catch is None:
            return
        torch.cuda.set_sync_debug_mode("default")
        self._catch.__exit__(None, None, None)
        syncs = sum("synchroniz" in str(r.message) for r in self.records)
        steps = max(trainer.global_step - self.start_step, 1)
        self.out.write_text(json.dumps({"syncs": syncs, "steps": steps}))


def _syncs(out: Path) -> list[str]:
    return ["+callbacks.syncs._target_=benchmarks.gpu_smoke.SyncCounter", f"+callbacks.syncs.out={out}"]


def _runs(tmp: Path) -> list[tuple[str, str, list[str], dict[str, str], int]]:
    """(name, script, overrides, extra env, expected exit code), in order: later runs use earlier runs' folders."""
    logs = lambda name: f"paths.log_dir={tmp / name}"  # noqa: E731
    last = lambda name, job="train": f"ckpt_path={next((tmp / name / job / 'runs').glob('*'))}/checkpoints/last.ckpt"  # noqa: E731
    return [
        ("default MLP", "train.py", [*GPU, *SHORT, logs("mlp"), *_syncs(tmp / "mlp.json")], {}, 0),
        (
            "CNN on_device+augment+channels_last",
            "train.py",
            [
                *GPU,
                *SHORT,
                "experiment=digits_cnn",
                "data.on_device=true",
                "data.augment=flip_crop",
                "channels_last=true",
                logs("cnn"),
                *_syncs(tmp / "cnn.json"),
            ],
            {},
            0,
        ),
        (
            "compile + steps_per_call=4",
            "train.py",
            [*GPU, *SHORT, "model=cnn", "compile=true", "steps_per_call=4", logs("compile")],
            {},
            0,
        ),
        (
            "deterministic CNN",
            "train.py",
            [*GPU, *SHORT, "model=cnn", "trainer.deterministic=true", logs("det")],
            {},
            0,
        ),
        ("exact resume: 2 epochs", "train.py", [*GPU, *SHORT, "trainer.max_epochs=2", logs("resume")], {}, 0),
        (
            "exact resume: +1 epoch",
            "train.py",
            [*GPU, *SHORT, "trainer.max_epochs=3", logs("resumed"), lambda: last("resume")],
            {},
            0,
        ),
        ("SIGTERM -> 143", "train.py", [*GPU, "trainer.max_epochs=50", logs("sigterm")], {"SIGTERM_AFTER": "25"}, 143),
        (
            "resume=auto after SIGTERM",
            "train.py",
            [*GPU, *SHORT, "trainer.max_epochs=1", "resume=auto", logs("sigterm")],
            {},
            0,
        ),
        (
            "pruning + QAT",
            "train.py",
            [
                *GPU,
                "callbacks=[default,pruning,qat]",
                "trainer.max_epochs=3",
                "trainer.limit_train_batches=20",
                logs("qat"),
            ],
            {},
            0,
        ),
        ("  CPU-only export", "export.py", ["report.rounds=1", lambda: last("qat"), logs("qat_export")], CPU_ONLY, 0),
        (
            "single-rank fsdp (vit)",
            "train.py",
            [
                *GPU,
                *SHORT,
                "model=vit",
                "strategy=fsdp",
                "trainer.devices=1",
                "trainer.precision=32-true",
                logs("fsdp"),
            ],
            {},
            0,
        ),
        ("  CPU-only eval", "eval.py", [lambda: last("fsdp"), logs("fsdp_eval")], CPU_ONLY, 0),
        (
            "GPT + text samples",
            "train.py",
            [
                *GPU,
                "experiment=gpt_char",
                "trainer.max_steps=60",
                "trainer.val_check_interval=30",
                "trainer.limit_val_batches=2",
                logs("gpt"),
                *_syncs(tmp / "gpt.json"),
            ],
            {},
            0,
        ),
        (
            "  generate on the GPU",
            "generate.py",
            [lambda: last("gpt", job="gpt_char"), "max_new_tokens=50", logs("gen")],
            {},
            0,
        ),
        ("EMA", "train.py", [*GPU, *SHORT, "callbacks=[default,ema]", logs("ema")], {}, 0),
        ("DQN", "train.py", [*GPU, "experiment=cartpole_dqn", "trainer.max_epochs=2", logs("dqn")], {}, 0),
    ]


def _run(script: str, overrides: list[Any], env: dict[str, str], timeout: float = 150) -> int:
    args = [o() if callable(o) else o for o in overrides]
    after = env.pop("SIGTERM_AFTER", None)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT,
        env={**os.environ, "HYDRA_FULL_ERROR": "1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if after:
            time.sleep(float(after))
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -9
    if proc.returncode not in (0, 143):
        print("    " + "\n    ".join(err.strip().splitlines()[-25:]), flush=True)
    return proc.returncode


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_smoke: no CUDA GPU on this machine (torch.cuda.is_available() is False): nothing to run")
        return 0
    print(f"gpu_smoke on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'run':40} {'rc':>4} {'want':>4} {'s':>6}  syncs/step")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpu_smoke_") as folder:
        tmp = Path(folder)
        for name, script, overrides, env, want in _runs(tmp):
            start = time.perf_counter()
            try:
                rc = _run(script, overrides, dict(env))
            except StopIteration:  # an earlier run left no checkpoint to use
                rc = -1
            seconds = time.perf_counter() - start
            counts = next(
                (o.split("=", 1)[1] for o in overrides if isinstance(o, str) and o.startswith("+callbacks.syncs.out=")),
                None,
            )
            per_step = ""
            if counts is not None and Path(counts).is_file():
                record = json.loads(Path(counts).read_text())
                per_step = f"{record['syncs'] / record['steps']:.2f}"
            failed += rc != want
            print(f"{name:40} {rc:>4} {want:>4} {seconds:6.1f}  {per_step}", flush=True)
    print(f"gpu_smoke: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
