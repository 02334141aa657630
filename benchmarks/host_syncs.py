"""Host syncs per training step of the default run, counted on CPU (what would make the CPU wait for a GPU).

    python benchmarks/host_syncs.py                       # the default digits run, log_every_n_steps=10
    python benchmarks/host_syncs.py trainer.log_every_n_steps=50 callbacks.nonfinite_loss.check_every_n_steps=1

Patches `Tensor.item/tolist/__float__/__bool__/__int__/cpu/numpy` and counts the calls between training batches 1
and 20 of the second epoch (steady state: no validation or epoch end inside), with where each came from. Not
counted, because they never wait for a device: the optimizers' step counters (torch/optim keeps them on the host) and
0-d CPU float64 tensors (litforge's host values, litforge.runtime.host_reads). tests/test_speed.py pins the same count;
on a GPU `torch.cuda.set_sync_debug_mode("warn")` reports the real syncs.
"""

from __future__ import annotations

import collections
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from omegaconf import open_dict
from pytorch_lightning.callbacks import Callback

import common  # noqa: F401  (puts src/ on sys.path)
from common import compose, quiet

START, STOP = 1, 20
METHODS = ("item", "tolist", "__float__", "__bool__", "__int__", "cpu", "numpy")
calls: collections.Counter[str] = collections.Counter()


class Window(Callback):
    counting = False

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == 1 and batch_idx in (START, STOP):
            Window.counting = batch_idx == START


def patch() -> None:
    def wrap(name: str, real: Any) -> Any:
        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if Window.counting and not (
                self.device.type == "cpu" and self.dtype == torch.float64 and self.numel() == 1
            ):
                stack = traceback.extract_stack(limit=4)[:-1]
                if not any(f"torch{os.sep}optim{os.sep}" in f.filename for f in stack):
                    calls[f"{name} <- " + " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in stack[::-1])] += 1
            return real(self, *args, **kwargs)

        return counted

    for name in METHODS:
        setattr(torch.Tensor, name, wrap(name, getattr(torch.Tensor, name)))


def main(overrides: list[str]) -> None:
    quiet()
    from litforge.jobs.train import train

    cfg = compose("trainer.max_epochs=2", "test_after_training=false", "print_config=false", *overrides)
    with open_dict(cfg):
        cfg.callbacks["zz_window"] = {"_target_": "host_syncs.Window"}
    patch()
    train(cfg)
    total, steps = sum(calls.values()), STOP - START
    print(
        f"\nhost syncs in {steps} steady-state steps (log_every_n_steps={cfg.trainer.log_every_n_steps}): {total} "
        f"({total / steps:.2f} per step)"
    )
    for where, n in calls.most_common():
        print(f"{n:5d}  {where}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    import host_syncs  # one copy of the module: the config's `_target_` names this one, not __main__

    host_syncs.main(sys.argv[1:])
