"""Shared pieces of the benchmarks: config composition, synthetic in-memory data, a step timer, a plain loop.

Each benchmark compares litforge's *own* training job (`litforge.jobs.train.train(cfg)` on a config composed exactly as
`python train.py <overrides>` composes it) with a hand-written PyTorch loop on the same net, data, batch size,
optimizer, LR schedule and thread count. Two measures per step:

- wall time per training step, from step start to the next step start *inside* an epoch (validation, checkpointing
  and other epoch-boundary work are reported separately), as the mean over the steady-state epochs;
- Python function calls per step (``sys.setprofile`` 'call' events over a window of steps): machine load does not
  move it, so it is what the regression test pins.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "src", ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402
from pytorch_lightning.callbacks import Callback  # noqa: E402

from litforge.data.base import ImageDataModule  # noqa: E402


def compose(*overrides: str, output_dir: str | None = None) -> Any:
    """conf/train.yaml composed as `python train.py overrides...` would, run folder in a temporary directory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)

    output_dir = output_dir or tempfile.mkdtemp(prefix="litforge-bench-")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(
            "train", overrides=[f"paths.output_dir={output_dir}", f"paths.data_dir={output_dir}/data", *overrides]
        )


class SyntheticImages(ImageDataModule):
    """Random uint8 images held in memory (e.g. MNIST- or CIFAR-shaped): the loop cost without a download."""

    def __init__(
        self,
        input_shape: Sequence[int] = (1, 28, 28),
        num_classes: int = 10,
        train_size: int = 6400,
        test_size: int = 512,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_shape = tuple(input_shape)
        self.num_classes = num_classes
        self.class_names = [str(i) for i in range(num_classes)]
        self.sizes = {"train": train_size, "test": test_size}

    def load_arrays(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0 if split == "train" else 1)
        n = self.sizes[split]
        images = torch.randint(0, 256, (n, *self.input_shape), generator=g, dtype=torch.uint8)
        return images, torch.randint(0, self.num_classes, (n,), generator=g)


def synthetic_data_cfg(input_shape: Sequence[int], train_size: int, batch_size: int, **extra: Any) -> dict[str, Any]:
    return {
        "_target_": "common.SyntheticImages",
        "input_shape": list(input_shape),
        "train_size": train_size,
        "batch_size": batch_size,
        "val_fraction": 0.1,
        **extra,
    }


class CallCounter:
    """Counts Python function calls ('call' profile events) while active; machine load does not change the count."""

    def __init__(self) -> None:
        self.calls = 0

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.calls += 1

    def start(self) -> None:
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)


class StepRecorder:
    """Step start times per epoch, and a call-count window; shared by the Lightning callback and the plain loop."""

    def __init__(self, count_window: tuple[int, int] | None = None) -> None:
        self.starts: dict[int, list[tuple[float, int]]] = {}  # per epoch: (time, optimizer steps done) per batch
        self.epoch_starts: list[float] = []
        self.count_window = count_window  # (epoch, first batch index): count `window` steps from there
        self.window_steps = 0
        self.counter = CallCounter()
        self.calls_per_step: float | None = None
        self._counting_until: int | None = None
        self._count_from_step = 0

    def epoch_start(self) -> None:
        self.epoch_starts.append(time.perf_counter())

    def step_start(self, epoch: int, batch_idx: int, step: int) -> None:
        """A training batch starts; `step` = optimizer steps so far (a batch holds several with steps_per_call)."""
        now = time.perf_counter()
        self.starts.setdefault(epoch, []).append((now, step))
        if self._counting_until is not None and batch_idx >= self._counting_until:
            self.counter.stop()
            self.calls_per_step = self.counter.calls / max(1, step - self._count_from_step)
            self._counting_until = None
        elif self.count_window and (epoch, batch_idx) == self.count_window[:2]:
            self.window_steps = self.count_window[2]
            self._counting_until = batch_idx + self.window_steps
            self._count_from_step = step
            self.counter.start()

    def step_time(self, skip_epochs: int = 1) -> float:
        """Mean seconds per optimizer step inside epochs (batch start → next batch start, over the optimizer steps
        between them), after `skip_epochs` warm-up epochs."""
        pairs = [
            (b[0] - a[0], b[1] - a[1])
            for e, ts in self.starts.items()
            if e >= skip_epochs
            for a, b in zip(ts, ts[1:], strict=False)
        ]
        if not pairs:  # one batch per epoch (steps_per_call >= steps per epoch): no step inside an epoch to time
            return float("nan")
        return sum(t for t, _ in pairs) / sum(n for _, n in pairs)

    def epoch_time(self, skip_epochs: int = 1) -> float:
        """Mean seconds per whole epoch (training, validation, checkpointing, logging), after warm-up epochs."""
        ts = self.epoch_starts[skip_epochs:]
        return (ts[-1] - ts[0]) / (len(ts) - 1)


class StepTimer(Callback):
    """Records litforge's steps into a StepRecorder (one hook per step: the cost of measuring, paid by both arms)."""

    last: StepRecorder | None = None

    def __init__(self, count_window: list[int] | None = None) -> None:
        self.recorder = StepRecorder(tuple(count_window) if count_window else None)
        StepTimer.last = self.recorder

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.epoch_start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.recorder.step_start(trainer.current_epoch, batch_idx, trainer.global_step)


def run_litforge(cfg: Any, count_window: Sequence[int] | None = None) -> StepRecorder:
    """`litforge.jobs.train.train(cfg)` (the job `python train.py` runs) with a StepTimer callback added."""
    from omegaconf import open_dict

    from litforge.jobs.train import train

    with open_dict(cfg):
        cfg.callbacks = cfg.callbacks or {}
        cfg.callbacks["zz_step_timer"] = {
            "_target_": "common.StepTimer",
            "count_window": list(count_window) if count_window else None,
        }
        cfg.test_after_training = False
        cfg.print_config = False
    train(cfg)
    assert StepTimer.last is not None
    return StepTimer.last


def run_plain(
    cfg: Any,
    count_window: Sequence[int] | None = None,
    after_epoch: Callable[[int, torch.nn.Module, dict[str, Any]], None] | None = None,
    keep_records: bool = False,
) -> StepRecorder:
    """The hand-written loop: same net, data split, batch size, optimizer and per-epoch LR schedule as `cfg`.

    It is what a careful user writes: whole batches sliced from pre-normalised tensors, `zero_grad(set_to_none)`,
    an eval pass per epoch under `torch.no_grad()`. `after_epoch(epoch, net, splits)` runs after each epoch's eval
    pass (e.g. a test-accuracy probe); `splits` maps train/val/test to normalised (images, labels).

    `keep_records`: also what `python train.py` keeps of a run, the way that user writes it: each epoch, the
    epoch's mean training loss, validation accuracy and learning rate as TensorBoard scalars, and a resumable
    checkpoint (net, optimizer, scheduler, epoch) saved to `last.pt` (written to a temporary name, then renamed)
    and copied to `best.pt` when the validation accuracy improved; in the run folder of `cfg`.
    """
    from hydra.utils import instantiate

    from litforge.core.instantiate import call_partial
    from litforge.jobs.build import build_task

    torch.manual_seed(cfg.seed)
    datamodule = instantiate(cfg.data, _convert_="all")
    datamodule.setup()
    net = build_task(cfg, datamodule.describe()).net
    device = torch.device("cuda" if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu" else "cpu")
    net.to(device)
    split = {name: (datamodule.normalize(x).to(device), y.to(device)) for name, (x, y) in datamodule._splits.items()}
    x_train, y_train = split["train"]
    optimizer_cfg = dict(cfg.optimizer)
    optimizer = call_partial("optimizer", optimizer_cfg, [p for p in net.parameters() if p.requires_grad])
    epochs = cfg.trainer.max_epochs
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = cfg.data.batch_size
    rec = StepRecorder(tuple(count_window) if count_window else None)
    folder = Path(cfg.paths.output_dir) / "plain"
    writer = None
    if keep_records:
        from torch.utils.tensorboard import SummaryWriter

        folder.mkdir(parents=True, exist_ok=True)
        writer = SummaryWriter(str(folder))
    best = -1.0
    for epoch in range(epochs):
        rec.epoch_start()
        net.train()
        order = torch.randperm(len(y_train), device=device)
        losses = []
        for i, start in enumerate(range(0, len(y_train), batch)):
            rec.step_start(epoch, i, epoch * -(-len(y_train) // batch) + i)
            idx = order[start : start + batch]
            loss = loss_fn(net(x_train[idx]), y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if keep_records:
                losses.append(loss.detach())
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        net.eval()
        with torch.no_grad():
            x_val, y_val = split["val"]
            acc = (net(x_val).argmax(1) == y_val).float().mean().item()
        if writer is not None:
            writer.add_scalar("train/loss", torch.stack(losses).mean().item(), epoch)
            writer.add_scalar("val/acc", acc, epoch)
            writer.add_scalar("lr", lr, epoch)
            state = {
                "net": net.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "epoch": epoch,
            }
            torch.save(state, folder / "last.pt.tmp")
            (folder / "last.pt.tmp").replace(folder / "last.pt")
            if acc > best:
                best = acc
                shutil.copyfile(folder / "last.pt", folder / "best.pt")
        if after_epoch is not None:
            after_epoch(epoch, net, split)
    if writer is not None:
        writer.close()
    rec.epoch_start()
    return rec


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def interleave(arms: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[Any]]:
    """Run every arm `repeats` times, alternating arms (and their order) so that load drifts hit all arms alike."""
    results: dict[str, list[Any]] = {name: [] for name in arms}
    names = list(arms)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            results[name].append(arms[name]())
    return results


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A GitHub-markdown table, so results paste straight into the README."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def quiet() -> None:
    """Keep Lightning's banners out of the tables."""
    import logging
    import warnings

    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "litforge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
