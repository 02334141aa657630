"""Pre-emption signals under 2-rank DDP: litforge's agreement vs a checkpoint saved inside the signal handler.

Both arms run the same seeded deliveries on 2 gloo ranks (tests/gloo.py): SIGUSR1 to every rank (as SLURM signals
every task) 0-1.5 s into training, landing in steps, DDP's gradient all-reduce, validation or an agreement.
`litforge` is the test harness of tests/test_preemption.py (the handler notes the signal; the ranks agree, save
`last.ckpt` and requeue through a fake `scontrol`); `in-handler` saves from inside the handler, as Lightning's
SLURM requeue (`SLURMEnvironment(auto_requeue=True)`) does, and trains on. A delivery whose ranks have not returned
after `--timeout` s counts as hung (the ranks are then replaced). Prints hangs and the slowest signal-to-end time.

    python benchmarks/preemption.py --deliveries 20
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

PRELOAD = ("pytorch_lightning", "test_preemption")


def _in_handler_on_ranks(rank: int, world_size: int, root: str, seed: int) -> dict:
    """The control arm: the same fit and delivery, a save inside the SIGUSR1 handler (Lightning's way)."""
    import pytorch_lightning as pl

    from gloo import tiny_module
    from test_preemption import _ddp_trainer, _delivery

    _, delay = _delivery(seed, every_rank=True)  # the litforge arm's delays

    class SaveInHandler(pl.Callback):
        def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            def handler(signum: int, frame: object) -> None:
                trainer.save_checkpoint(str(Path(root) / "hpc_ckpt_1.ckpt"))  # _slurm_sigusr_handler_fn's save

            signal.signal(signal.SIGUSR1, handler)
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGUSR1)).start()

    trainer = _ddp_trainer(
        root,
        world_size,
        max_time={"seconds": 4},  # Lightning trains on after its save (SLURM ends the job later)
        callbacks=[SaveInHandler()],
    )
    trainer.fit(tiny_module(rows=512, width=64))
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    return {"saved": (Path(root) / "hpc_ckpt_1.ckpt").exists()}


def _fresh_ranks():
    """Two new gloo ranks (after a hang the old ones are killed); a second try if the first start fails."""
    from gloo import GlooRanks

    try:
        return GlooRanks(2, preload=PRELOAD, start_timeout=120)
    except AssertionError:
        return GlooRanks(2, preload=PRELOAD, start_timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=20)
    parser.add_argument("--arm", choices=["litforge", "in-handler", "both"], default="both")
    parser.add_argument("--timeout", type=float, default=30, help="s after which a delivery counts as hung")
    args = parser.parse_args()

    from test_preemption import _deliver_on_ranks

    arms = ["litforge", "in-handler"] if args.arm == "both" else [args.arm]
    for arm in arms:
        pool, hung, slowest = _fresh_ranks(), 0, 0.0
        with tempfile.TemporaryDirectory() as scratch:
            for seed in range(args.deliveries):
                root = str(Path(scratch) / f"delivery{seed}")
                try:
                    if arm == "litforge":
                        results = pool.run(_deliver_on_ranks, root, seed, True, timeout=args.timeout)
                        sent = min(r["sent"] for r in results if r["sent"] is not None)
                        slowest = max(slowest, max(r["ended"] for r in results) - sent)
                    else:
                        pool.run(_in_handler_on_ranks, root, seed, timeout=args.timeout)
                except AssertionError:
                    hung += 1
                    pool = _fresh_ranks()
        pool.close()
        extra = f", slowest signal-to-end of both fits {slowest:.2f} s" if arm == "litforge" else ""
        print(f"{arm}: {hung} of {args.deliveries} deliveries hung (> {args.timeout:g} s){extra}", flush=True)


if __name__ == "__main__":
    main()
