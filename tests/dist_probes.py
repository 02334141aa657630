"""Callbacks the distributed tests add to real CLI runs (`+callbacks.probe._target_=tests.dist_probes.X`).

Each rank writes what it saw to `<out>/rank<N>.json`, so a test can check what happened inside every process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch


class RaiseOnRank(pl.Callback):
    """Raise on one rank at a training step, after writing the time it did so."""

    def __init__(self, out: str, rank: int = 1, step: int = 1) -> None:
        self.out, self.rank, self.step = Path(out), rank, step

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "raised_at").write_text(str(time.time()))
            raise RuntimeError(f"injected failure on rank {self.rank}")


def local_numel(module: torch.nn.Module) -> tuple[int, int]:
    """(elements this rank holds, elements of the whole model): what sharding saves per rank."""
    local = total = 0
    for param in module.parameters():
        total += param.numel()
        local += param.to_local().numel() if hasattr(param, "to_local") else param.numel()
    return local, total


class Record(pl.Callback):
    """Per rank: parameter elements held locally vs in the model, the loss and a weight fingerprint after every step,
    and (all ranks computing, rank 0 writing) the model's outputs on a fixed input at the end of training."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.record: dict[str, Any] = {"losses": [], "fingerprints": []}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        local, total = local_numel(pl_module)
        self.record.update(
            local_numel=local, total_numel=total, rank=trainer.global_rank, world_size=trainer.world_size
        )

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        # FSDP2 reshards a unit after its forward unless strategy.reshard_after_forward=false: count what is still
        # sharded (DTensor) between forward and backward, once
        self.record.setdefault("sharded_before_backward", sum(hasattr(p, "to_local") for p in pl_module.parameters()))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        self.record["losses"].append(float(outputs["loss"]))
        with torch.no_grad():  # a fingerprint of this rank's local weights: differs as soon as any weight differs
            self.record["fingerprints"].append(
                sum(
                    float((p.to_local() if hasattr(p, "to_local") else p).double().sum())
                    for p in pl_module.parameters()
                )
            )

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        channels, height, width = pl_module.hparams["input_shape"]
        inputs = torch.randn(4, channels, height, width, generator=torch.Generator().manual_seed(0))
        pl_module.eval()
        with torch.no_grad():
            logits = pl_module(inputs)
        logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
        self.record["logits"] = logits.tolist()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record))
