"""Low-communication data parallelism: `strategy=diloco` (conf/strategy/diloco.yaml, litforge/parallel/diloco.py).

The in-process test runs Lightning's real fit / resume on a one-process gloo group (cheap); the distributed test runs
the real CLI on 2 gloo processes against `strategy=ddp`.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, single_run

QUIET = ["trainer=cpu", "callbacks.model_summary=null", "logger=csv"]


def _tiny_fit(max_epochs: int, ckpt_in: Path | None = None, ckpt_out: Path | None = None) -> dict[str, torch.Tensor]:
    """Fit a linear regression under DiLoCo (H=4, outer momentum) with a stateless inner SGD; its final weights."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from litforge.parallel.diloco import DiLoCo

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)  # no momentum: nothing per replica to lose on resume

        def train_dataloader(self):
            x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)  # 6 steps an epoch

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        strategy=DiLoCo(sync_every=4, outer_lr=0.7, outer_momentum=0.9, process_group_backend="gloo"),
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = Tiny()
    trainer.fit(module, ckpt_path=ckpt_in)
    if ckpt_out is not None:
        trainer.save_checkpoint(ckpt_out)
    return {k: v.clone() for k, v in module.state_dict().items()}


# Lightning suggests sync_dist for every epoch-level value once a process group exists; this one is equal on all ranks.
@pytest.mark.filterwarnings("ignore:It is recommended to use `self.log\\('train/comm_bytes_per_step'")
def test_diloco_checkpoint_holds_the_outer_state_and_resumes_exactly(tmp_path: Path):
    """1 epoch + resume for 1 more == 2 epochs straight, from a checkpoint taken between syncs (6 steps, H=4); the
    same resume without the saved outer state (anchor, momentum, step counter) ends elsewhere."""
    with mock.patch.dict(os.environ):  # Lightning's launcher sets MASTER_PORT, WORLD_SIZE, ... in this process
        try:
            straight = _tiny_fit(2)
            _tiny_fit(1, ckpt_out=tmp_path / "one.ckpt")
            resumed = _tiny_fit(2, ckpt_in=tmp_path / "one.ckpt")
            saved = torch.load(tmp_path / "one.ckpt", weights_only=True)
            state = saved.pop("diloco")
            torch.save(saved, tmp_path / "no_outer_state.ckpt")
            forgetful = _tiny_fit(2, ckpt_in=tmp_path / "no_outer_state.ckpt")
        finally:
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    assert (state["steps_since_sync"], state["optimizer_steps"], state["syncs"]) == (2, 6, 1)
    assert all(s["momentum_buffer"].abs().sum() > 0 for s in state["outer_optimizer"]["state"].values())
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], atol=1e-6, rtol=1e-5, msg=key)
    assert any(not torch.allclose(forgetful[k], straight[k], atol=1e-4) for k in straight)


@pytest.mark.slow
@pytest.mark.distributed
def test_diloco_every_step_without_outer_momentum_is_ddp(tmp_path: Path):
    """H=1, outer lr 1, no outer momentum on 2 gloo processes: DDP's weights (inner SGD with momentum and weight
    decay is linear in the gradient, so averaging the replicas after a step equals stepping on averaged gradients);
    the run logs the bytes it all-reduced per optimizer step (the parameters, fp32) and checkpoints the outer state."""
    common = [
        *TINY,
        *QUIET,
        "model.dropout=0.0",
        "callbacks.early_stopping=null",
        "trainer.max_epochs=1",
        "optimizer=sgd",
        "trainer.devices=2",
        "data.batch_size=16",
    ]
    runs = {
        "ddp": ["strategy=ddp"],
        "diloco": ["strategy=diloco", "strategy.sync_every=1", "strategy.outer_lr=1", "strategy.outer_momentum=0"],
    }
    ckpts = {}
    for name, strategy in runs.items():
        result = run_cli("train.py", *common, *strategy, log_dir=tmp_path / name, timeout=300)
        assert result.returncode == 0, result.output[-3000:]
        ckpts[name] = torch.load(single_run(tmp_path / name) / "checkpoints" / "last.ckpt", weights_only=True)
    ddp, diloco = ckpts["ddp"]["state_dict"], ckpts["diloco"]["state_dict"]
    assert ddp.keys() == diloco.keys()
    for key in ddp:
        torch.testing.assert_close(diloco[key], ddp[key], atol=2e-6, rtol=1e-5, msg=key)
    param_bytes = sum(t.numel() * t.element_size() for t in ckpts["diloco"]["diloco"]["anchors"])
    assert read_metrics(single_run(tmp_path / "diloco"))["metrics"]["train/comm_bytes_per_step"] == param_bytes
    assert ckpts["diloco"]["diloco"]["syncs"] == ckpts["diloco"]["global_step"] == 4
