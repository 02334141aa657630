"""Training losses kept on the device and read to the host in one copy, shared by the task's logging and the NaN guard.

Why: on a GPU every `.item()`/`.tolist()`/`float()` of a device tensor makes the CPU wait for the GPU's queue to
drain, so it can no longer run ahead; for a small net that wait is most of a step. A training step therefore only
*keeps* its loss (a reference, no copy). On the steps the loggers write (`trainer.log_every_n_steps`) the task reads
every kept loss in one `.tolist()`: the logged `train/loss` comes from those host values (as a CPU tensor, so
Lightning's logger and progress bar convert it without touching the device), and the NaN/inf guard
(litforge.callbacks.fault_tolerance) checks the same host values instead of reading them again. That is one host
sync per `log_every_n_steps` steps in steady state; tests/test_speed.py counts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import Tensor

if TYPE_CHECKING:
    import pytorch_lightning as pl

Where = tuple[int, int, int]  # (global step of the first optimizer step, epoch, batch index)


def writes_step_metrics(trainer: pl.Trainer, step_at_batch_start: int) -> bool:
    """Whether Lightning's loggers write the step metrics of the training batch that began at global step
    `step_at_batch_start` (asked during the batch: in the training step or at its end).

    Lightning decides this in its logger connector (the private `should_update_logs`) from its count of batches that
    stepped, which litforge keeps equal to `trainer.global_step` (steps_per_call advances both by its N; gradient
    accumulation steps both once per stepping batch). The batch is written when the count it ends on, at least one
    more than at its start, is a multiple of `trainer.log_every_n_steps`, or when the run stops.
    tests/test_compat.py compares this with Lightning's own decision at every batch of such runs.
    """
    every = getattr(trainer, "log_every_n_steps", 1)  # set by Lightning's logger connector (not in barebones mode)
    ends_on = max(trainer.global_step, step_at_batch_start + 1)
    return bool(every) and (ends_on % every == 0 or bool(trainer.should_stop))


class StepLosses:
    """Losses of the training steps since the last read (device), and host values the guard has not checked yet."""

    def __init__(self) -> None:
        self.pending: list[tuple[Where, Tensor]] = []
        self.unchecked: list[tuple[Where, list[float]]] = []
        self.kept = 0  # losses kept so far: the guard sees whether the task fed this step

    def keep(self, loss: Tensor, where: Where) -> None:
        """Keep one training step's loss (one element per optimizer step under steps_per_call > 1)."""
        self.pending.append((where, loss.detach().reshape(-1)))
        self.kept += 1

    def read(self) -> list[float]:
        """Copy every pending loss to the host in one `.tolist()`; returns the values of the latest step."""
        if not self.pending:
            return []
        pending, self.pending = self.pending, []
        flat = pending[0][1] if len(pending) == 1 else torch.cat([t for _, t in pending])
        values = flat.tolist()  # the one device->host copy
        offset = 0
        for where, tensor in pending:
            self.unchecked.append((where, values[offset : offset + tensor.numel()]))
            offset += tensor.numel()
        return self.unchecked[-1][1]

    def take(self) -> list[tuple[Where, list[float]]]:
        """The host values read since the last call (what the guard checks)."""
        out, self.unchecked = self.unchecked, []
        return out


def host_scalar(value: float) -> Tensor:
    """A value already on the host, as the 0-d CPU float64 tensor `self.log` accepts without a device copy.

    A Python float passed to `self.log` becomes a tensor on the module's device (a host->device copy that waits for
    the GPU queue), and Lightning later reads it back for the loggers and the progress bar (two more waits). A CPU
    tensor stays on the CPU through Lightning's result collection. float64 keeps the Python float exactly.
    """
    return torch.tensor(value, dtype=torch.float64)


@runtime_checkable
class KeepsLosses(Protocol):
    """A task that keeps its training losses here, on the device, and reads them only on logging steps
    (LitforgeTask): the non-finite-loss check reads them from it instead of from each step's output."""

    step_losses: StepLosses
