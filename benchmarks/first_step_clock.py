"""A callback for benchmarks/startup.py: writes the wall-clock time of the first optimizer step to a file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pytorch_lightning.callbacks import Callback


class FirstStepClock(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.done = False

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if not self.done:
            self.path.write_text(repr(time.time()))
            self.done = True
