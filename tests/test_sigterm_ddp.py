"""SIGTERM under DDP without a per-step collective (issue 17 goal 4), and the NaN stop decided by every rank together:
2 gloo ranks, real Lightning DDP fits.

Lightning broadcasts a SIGTERM flag before every DDP step; litforge's on-signal callback replaces that (and the handler
that broadcast inside the signal handler) with an all-reduce every N batches. Collectives are counted by wrapping
torch.distributed's Python functions: DDP's gradient all-reduce runs in its C++ reducer and is not among them.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from gloo import GlooRanks, quiet_trainer, tiny_module

pytestmark = pytest.mark.distributed

COUNTED = ("broadcast", "all_reduce", "barrier", "all_gather", "reduce", "broadcast_object_list", "all_gather_object")


def _fit_on_ranks(rank: int, world_size: int, root: str, sigterm_ranks: tuple[int, ...], litforge: bool) -> dict:
    """One DDP fit of 10 batches per rank; SIGTERM to `sigterm_ranks` after step 5. Returns what each rank saw."""
    import pytorch_lightning as pl
    import torch.distributed as dist

    from litforge.callbacks.fault_tolerance import CheckpointOnSignal
    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    calls: list[str] = []
    real = {name: getattr(dist, name) for name in COUNTED}

    def counted(name):
        def call(*args, **kwargs):
            calls.append(name)
            return real[name](*args, **kwargs)

        return call

    per_batch: list[list[str]] = []

    class Record(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            calls.clear()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            per_batch.append(calls[:])  # the collectives since the previous batch started (its step, the check)
            calls.clear()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 5 and rank in sigterm_ranks:
                os.kill(os.getpid(), signal.SIGTERM)

    on_signal = CheckpointOnSignal(hang_grace=None, check_every_n_steps=4)
    trainer = quiet_trainer(
        root,
        world_size,
        limit_val_batches=0,  # training only: the collectives counted are the steps' and the checks'
        log_every_n_steps=4,
        callbacks=[Record(), *([on_signal] if litforge else [])],
    )
    for name in COUNTED:
        setattr(dist, name, counted(name))
    exit_code = 0
    try:
        fit_or_stop(trainer, tiny_module(rows=80), None, None, Path(root))  # 40 rows per rank: 10 batches
    except TrainingStopped as stopped:
        exit_code = stopped.exit_code
    finally:
        for name in COUNTED:
            setattr(dist, name, real[name])
    return {"per_batch": per_batch, "step": trainer.global_step, "saved": on_signal.saved_path, "exit_code": exit_code}


GLOO_PRELOAD = ("pytorch_lightning", "litforge.jobs.train")  # what the shared `ranks` fixture (conftest) imports first


def test_lightning_alone_broadcasts_before_every_step(ranks: GlooRanks, tmp_path):
    """The control arm: the counter sees Lightning's per-step SIGTERM broadcast
    (Lightning-AI/pytorch-lightning#21487)."""
    for seen in ranks.run(_fit_on_ranks, str(tmp_path), (), False, timeout=120):
        assert seen["per_batch"] == [["broadcast"]] * 10 and seen["exit_code"] == 0


@pytest.mark.parametrize("sigterm_ranks", [(1,), (0,), (0, 1)], ids=["rank1", "rank0", "both"])
def test_sigterm_checkpoints_every_rank_with_no_per_step_collective(ranks: GlooRanks, tmp_path, sigterm_ranks):
    """SIGTERM after step 5, ranks agree every 4 batches: no collective before batches 1-3 and 5-7, one all-reduce
    before 0 and 4; every rank stops at step 8 (the same batch), saves and exits 143. SIGTERM at step 5 with checks
    every 4 steps is the case that hung when only the loop's broadcast was thinned out (rank 0 blocked in the
    broadcast Lightning's handler makes): a hang fails here after the 120 s timeout."""
    results = ranks.run(_fit_on_ranks, str(tmp_path), sigterm_ranks, True, timeout=120)
    for rank, seen in enumerate(results):
        assert seen["per_batch"] == [["all_reduce"], [], [], [], ["all_reduce"], [], [], []], f"rank {rank}"
        assert (seen["step"], seen["exit_code"]) == (8, 143), f"rank {rank}"
        assert seen["saved"] == str(tmp_path / "checkpoints" / "last.ckpt"), f"rank {rank} saved nothing"
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8


def _validate_on_ranks(rank: int, world_size: int, root: str) -> dict:
    """One DDP fit of 2 training batches then a validation of 8 batches per rank; SIGTERM to rank 1 only, after its
    validation batch 0. Returns the validation batches each rank ran and how it ended."""
    import pytorch_lightning as pl

    from litforge.callbacks.fault_tolerance import CheckpointOnSignal
    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    seen: list[int] = []

    class Record(pl.Callback):
        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            if trainer.sanity_checking:
                return
            seen.append(batch_idx)
            if batch_idx == 0 and rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    on_signal = CheckpointOnSignal(hang_grace=None, check_every_n_steps=2)
    trainer = quiet_trainer(root, world_size, callbacks=[Record(), on_signal])
    exit_code = 0
    try:
        fit_or_stop(trainer, tiny_module(train_batch=16), None, None, Path(root))  # per rank: 2 batches, 8 validating
    except TrainingStopped as stopped:
        exit_code = stopped.exit_code
    return {"seen": seen, "exit_code": exit_code, "saved": on_signal.saved_path}


def test_sigterm_to_one_rank_mid_validation_stops_every_rank_at_the_same_validation_batch(ranks: GlooRanks, tmp_path):
    """Under DDP only an agreement stops a rank (its handler only notes the signal): the ranks agree every 2
    validation batches, so SIGTERM to rank 1 after validation batch 0 stops both after batch 1 of 8, saved, 143."""
    for rank, seen in enumerate(ranks.run(_validate_on_ranks, str(tmp_path), timeout=120)):
        assert (seen["seen"], seen["exit_code"]) == ([0, 1], 143), f"rank {rank}: {seen}"
        assert seen["saved"] == str(tmp_path / "checkpoints" / "last.ckpt"), f"rank {rank} saved nothing"
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 2
    assert saved["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]["total"]["completed"] == 0, (
        "the resumed run must validate again from the first batch"
    )


def _nan_on_ranks(rank: int, world_size: int, root: str, nan_rank: int, nan_step: int) -> dict:
    """One DDP fit of 10 batches per rank with litforge's NaN stop checking every step; `nan_rank`'s loss is NaN at
    optimizer step `nan_step` (every other loss of both ranks is finite). Returns where and how each rank stopped."""
    from litforge.callbacks.fault_tolerance import StopOnNonFiniteLoss
    from litforge.callbacks.training import fit_or_stop
    from litforge.core.errors import TrainingStopped

    module = tiny_module(rows=80)  # 40 rows per rank: 10 batches
    own_step = module.training_step

    def training_step(batch, batch_idx):
        loss = own_step(batch, batch_idx)
        return loss * float("nan") if rank == nan_rank and module.trainer.global_step == nan_step else loss

    module.training_step = training_step
    trainer = quiet_trainer(
        root, world_size, limit_val_batches=0, log_every_n_steps=1, callbacks=[StopOnNonFiniteLoss()]
    )
    message, exit_code = "", 0
    try:
        fit_or_stop(trainer, module, None, None, Path(root))
    except TrainingStopped as stopped:
        message, exit_code = str(stopped), stopped.exit_code
    return {"step": trainer.global_step, "message": message, "exit_code": exit_code}


@pytest.mark.parametrize("nan_rank", [0, 1])
def test_a_nan_on_one_rank_stops_every_rank_at_the_same_step(ranks: GlooRanks, tmp_path, nan_rank: int):
    """Real: 2 gloo ranks in a Lightning DDP fit and litforge's StopOnNonFiniteLoss, its decision a real all-reduce
    (no mocked strategy). One rank's loss is NaN at step 5 while the other's is finite: the NaN rank names the step
    (docs/reliability.md's message), the other says another rank's loss became NaN, and both stop after step 5
    (global step 6), exit 1; neither blocks in the next gradient all-reduce (a hang fails after the 120 s timeout)."""
    results = ranks.run(_nan_on_ranks, str(tmp_path), nan_rank, 5, timeout=120)
    for rank, seen in enumerate(results):
        assert (seen["step"], seen["exit_code"]) == (6, 1), f"rank {rank}: {seen}"
        if rank == nan_rank:
            assert "the loss became nan at step 5 (epoch 0, batch 5)" in seen["message"], seen["message"]
        else:
            assert "another rank's loss became NaN/inf" in seen["message"], seen["message"]
