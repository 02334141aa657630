"""`strategy=hogwild` (conf/strategy/hogwild.yaml, litforge/parallel/hogwild.py): lock-free updates of one shared
copy of the parameters by worker processes.

The no-waiting test runs Lightning's real fit on 2 gloo ranks (tests/gloo.py, no CLI) with a slow rank 1, under
hogwild and under DDP; the clock test runs the wall-clock checkpoint on 2 real hogwild ranks; the CLI test trains the
digits MLP on 2 processes, checkpoints and resumes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import read_metrics, run_cli, single_run
from gloo import GlooRanks, quiet_trainer

QUIET = [
    "trainer=cpu",
    "callbacks.model_summary=null",
    "logger=csv",
    "print_config=false",
    "callbacks.progress_bar=null",
]
STEPS, SLOW_S = 12, 0.05  # rank 1 sleeps SLOW_S in each of its STEPS training steps


def _fit_with_a_slow_worker(rank: int, world_size: int, strategy_name: str, root: str) -> dict[str, Any]:
    """One rank of a 2-rank fit of a linear regression in which rank 1 is slow; what this rank saw."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from litforge.parallel.hogwild import Hogwild

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(8, 1)
            self.foreign_writes = 0  # steps of rank 1 during which another worker changed the weights

        def on_train_start(self):
            # both start stepping together: on a busy machine rank 0 once took all its steps before rank 1 took its
            # first, so rank 1 never saw a write land while it computed (CI, 3 test workers on 2 cores)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.barrier()

        def training_step(self, batch, _):
            if self.global_rank == 0:
                time.sleep(SLOW_S / 10)  # fast, yet its 12 steps span rank 1's first ones
            if self.global_rank == 1:  # slow: the weights this step read may change while it computes
                before = torch.cat([p.detach().reshape(-1).clone() for p in self.parameters()])
                time.sleep(SLOW_S)
                self.foreign_writes += not torch.equal(
                    before, torch.cat([p.detach().reshape(-1) for p in self.parameters()])
                )
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if batch_idx == 0:
                self.first_step_done = time.perf_counter()
            self.last_step_done = time.perf_counter()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            x = torch.randn(STEPS * 2 * 4, 8, generator=torch.Generator().manual_seed(0))
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)  # STEPS per rank

    # "ddp": quiet_trainer's gloo DDP, the same run with waiting, to compare by hand
    strategy = Hogwild(process_group_backend="gloo") if strategy_name == "hogwild" else None
    trainer = quiet_trainer(root, world_size, strategy=strategy, limit_val_batches=0)
    module = Tiny()
    trainer.fit(module)
    out = {
        "steps_s": module.last_step_done - module.first_step_done,
        "foreign_writes": module.foreign_writes,
        "final": torch.cat([p.detach().reshape(-1) for p in module.parameters()]).tolist(),
    }
    if strategy_name == "hogwild":
        out.update(stale_max=strategy._stale_max, steps=strategy._stale_steps)
    return out


@pytest.mark.distributed
def test_hogwild_workers_update_one_shared_copy_without_waiting(ranks: GlooRanks, tmp_path: Path):
    """Rank 1 sleeps 50 ms in each of its 12 steps, so under DDP every rank's steps take >= 50 ms (each waits at
    the all-reduce). Under hogwild rank 0 takes its steps at its own speed, rank 1 sees weights change while it
    computes (rank 0's writes land in the one shared copy) and counts them (staleness), and both end with the same
    weights."""
    fast, slow = ranks.run(_fit_with_a_slow_worker, "hogwild", str(tmp_path), timeout=120)
    waiting = (STEPS - 1) * SLOW_S  # what rank 0's steps 1..12 would take at least if it waited for rank 1
    assert slow["steps_s"] >= 0.9 * waiting, slow
    assert fast["steps_s"] < 0.5 * waiting, (fast["steps_s"], slow["steps_s"])
    assert slow["foreign_writes"] >= 1 and slow["stale_max"] >= 2, slow
    assert fast["steps"] == slow["steps"] == STEPS
    assert fast["final"] == slow["final"]  # one copy: both end with what the last writer left


def test_hogwild_refusals_name_the_key_and_the_fix(compose_cfg):
    from litforge.config.check import check_config
    from litforge.core.errors import ConfigError
    from litforge.parallel.hogwild import Hogwild, refuse_batch_norm

    with pytest.raises(ConfigError, match="BatchNorm.*model=mlp"):
        refuse_batch_norm(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)))
    refuse_batch_norm(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2)))  # no running statistics
    with pytest.raises(ConfigError, match="strategy.decide_every=0"):
        Hogwild(decide_every=0)
    with pytest.raises(ConfigError, match="trainer.accelerator=gpu with strategy=hogwild.*trainer=cpu"):
        check_config(compose_cfg("strategy=hogwild", "trainer.accelerator=gpu"))
    check_config(compose_cfg("strategy=hogwild", "trainer=cpu"))


@pytest.mark.slow
@pytest.mark.distributed
def test_hogwild_cli_trains_checkpoints_and_resumes(tmp_path: Path):
    """`python train.py strategy=hogwild trainer.devices=2` trains the digits MLP, logs staleness, saves a
    checkpoint with each worker's update count, and `resume=<run>` continues the counts and the epochs."""
    common = [*QUIET, "strategy=hogwild", "trainer.devices=2", "callbacks.early_stopping=null"]
    first = run_cli("train.py", *common, "trainer.max_epochs=1", log_dir=tmp_path, timeout=300)
    assert first.returncode == 0, first.output[-3000:]
    run = single_run(tmp_path)
    one = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    per_rank = one["global_step"]
    assert one["hogwild"]["updates"] == [per_rank, per_rank] and per_rank > 5
    resumed = run_cli("train.py", *common, "trainer.max_epochs=2", f"resume={run}", log_dir=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.output[-3000:]
    two = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert two["epoch"] == 1 and two["hogwild"]["updates"] == [2 * per_rank, 2 * per_rank]
    metrics = read_metrics(run)["metrics"]
    assert metrics["val/acc"] > 0.8, metrics
    assert 0 <= metrics["hogwild/staleness_mean"] <= metrics["hogwild/staleness_max"], metrics


def _clock_checkpoint_on_hogwild(rank: int, world_size: int, root: str) -> list[int]:
    """One rank of a 2-rank hogwild fit (decide_every=4, 12 steps per rank) with the wall-clock `checkpoint_every=1h`
    callback; the global steps at which that callback took a collective (`strategy.broadcast`) on this rank."""
    from gloo import tiny_module
    from litforge.checkpointing.clock import checkpoint_every
    from litforge.parallel.hogwild import Hogwild

    strategy = Hogwild(decide_every=4, process_group_backend="gloo")
    clock = checkpoint_every("1h", Path(root) / "checkpoints")
    asked: list[int] = []
    inside = [False]
    real_broadcast, real_batch_end = strategy.broadcast, clock.on_train_batch_end

    def broadcast(obj: Any, src: int = 0) -> Any:
        if inside[0]:
            asked.append(trainer.global_step)
        return real_broadcast(obj, src)

    def on_train_batch_end(*args: Any) -> None:
        inside[0] = True
        try:
            real_batch_end(*args)
        finally:
            inside[0] = False

    strategy.broadcast, clock.on_train_batch_end = broadcast, on_train_batch_end
    trainer = quiet_trainer(
        root, world_size, strategy=strategy, limit_val_batches=0, enable_checkpointing=True, callbacks=[clock]
    )
    trainer.fit(tiny_module(rows=96))  # 48 rows per rank: 12 steps
    return asked


@pytest.mark.distributed
def test_the_wall_clock_checkpoint_meets_only_every_decide_every_steps_on_real_hogwild_ranks(
    ranks: GlooRanks, tmp_path: Path
):
    """Real: 2 gloo ranks in Lightning fits under litforge's Hogwild strategy, with the `checkpoint_every=1h` callback
    (Lightning's ModelCheckpoint broadcasts rank 0's clock decision every step). Each rank's clock takes its
    collective only at steps 4, 8 and 12 (decide_every=4), the same steps on both ranks; a mismatched collective
    would hang and fail after the 120 s timeout."""
    for rank, asked in enumerate(ranks.run(_clock_checkpoint_on_hogwild, str(tmp_path), timeout=120)):
        assert asked == [4, 8, 12], f"rank {rank}: {asked}"
