"""Learning-rate schedules torch does not ship as one class.

`WarmupCosine`: a linear warmup then a cosine decay, the usual recipe for transformers (GPT-2/3, ViT, BERT). torch
can compose it (`SequentialLR` of `LinearLR` and `CosineAnnealingLR`), but that chain warns about the order of
`step()` calls at construction, cannot take the warmup as a fraction of the run, and its state is two nested
schedulers; one closed-form class is easier to read, to resume and to test (`conf/scheduler/warmup_cosine.yaml`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from litforge.core.bounds import Count, HeldOut, NonNegative, NonNegativeInt
from litforge.core.errors import ConfigError


def warmup_length(total_steps: int, warmup_steps: int | None, warmup_fraction: float) -> int:
    """The warmup in scheduler steps: `warmup_steps` if given, else `warmup_fraction` of `total_steps` (rounded)."""
    warmup = int(warmup_steps) if warmup_steps is not None else int(round(warmup_fraction * total_steps))
    if warmup >= total_steps:
        raise ConfigError(
            f"scheduler.scheduler.warmup_steps={warmup} leaves no steps to decay over: the run has {total_steps} "
            f"scheduler steps; pass fewer, e.g. scheduler.scheduler.warmup_steps={max(0, total_steps // 10)}"
        )
    return warmup


class WarmupCosine(LRScheduler):
    """lr(t) = base·(t+1)/W for the first W steps, then eta_min + (base − eta_min)·½(1 + cos(π·(t−W)/(T−W))).

    `t` counts `scheduler.step()` calls (optimizer steps with `interval: step`). The first step already trains at
    base/W, not at 0 (nothing is learnt at lr 0); the peak `base` is reached on step W−1 (and step W, where the decay
    starts), and the last of the T steps runs just above `eta_min`. W=0 is a plain cosine decay.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_steps: Count,
        warmup_steps: NonNegativeInt | None = None,
        warmup_fraction: HeldOut = 0.05,
        eta_min: NonNegative = 0.0,
        last_epoch: int = -1,
    ) -> None:
        self.total_steps = int(total_steps)
        self.warmup_steps = warmup_length(self.total_steps, warmup_steps, float(warmup_fraction))
        self.eta_min = float(eta_min)
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        """The multiplier of (base − eta_min) above eta_min after warmup; during warmup, of base (from 0)."""
        warmup, total = self.warmup_steps, self.total_steps
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / (total - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def multiplier(self, step: int, base: float) -> float:
        """lr(step) / base for a group whose peak lr is `base`."""
        if step < self.warmup_steps:
            return self.factor(step)
        return (self.eta_min + (base - self.eta_min) * self.factor(step)) / base if base else 0.0

    def get_lr(self) -> list[float | Tensor]:
        step = self.last_epoch
        for group in self.optimizer.param_groups[len(self.base_lrs) :]:
            # a group added mid-run (callbacks=finetune unfreezes the backbone): it joins the curve where it is now,
            # its lr at this moment taken as its point on the curve (torch's schedulers would leave it unscheduled)
            previous = max(0, step - 1)
            self.base_lrs.append(group["lr"] / (self.multiplier(previous, group["lr"]) or 1.0))
            group.setdefault("initial_lr", self.base_lrs[-1])
        if step < self.warmup_steps:
            return [base * self.factor(step) for base in self.base_lrs]
        return [self.eta_min + (base - self.eta_min) * self.factor(step) for base in self.base_lrs]
