"""N gloo ranks in fresh processes that run test functions, each call under a hard timeout.

Much cheaper than a CLI run (no Lightning launcher, no Hydra), and the ranks are started once for several tests (a
module-scoped fixture). A rank that hangs on a mismatched collective fails the call after `timeout` seconds instead
of blocking the suite; the ranks are then killed and later calls fail at once. Start-up has its own, longer clock.

`rank_context()` is the multiprocessing context every multi-rank test in the suite starts its ranks from:
multiprocessing's "forkserver", with torch, Lightning, torchmetrics and torchvision preloaded in the server. A
spawned rank imported them again (4-5 s of CPU each on 2 cores, about 40 ranks in the suite); a forked one starts in
milliseconds. The ranks are still separate processes with their own gloo sockets, forked from a process that has
imported but never run a torch op (the same reason tests/cli_server.py's forks are safe); what they do not inherit
is the test's later environment: the server's is the one of its start, so each rank function sets the variables it
needs itself.

`quiet_trainer` is the silent CPU `pl.Trainer`, and `tiny_module` the small seeded regression, that the functions run
on the ranks (and a few single-process tests and benchmarks/preemption.py) fit with.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PRELOADED = (
    "torch",
    "torch.distributed",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "pytorch_lightning",
    "torchmetrics",
    "torchvision",
    "gloo",
)


def rank_context() -> Any:
    """multiprocessing's forkserver context, its server preloading `PRELOADED` (one server per test process, started
    at the first rank)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOADED))
    return ctx


def start_ranks(fn: Callable[..., Any], args: tuple[Any, ...], nprocs: int) -> None:
    """`torch.multiprocessing.spawn(fn, args, nprocs)` (fn(rank, *args) on each rank, join, a rank's exception
    raised here) with the ranks forked from `rank_context()`'s server."""
    import torch.multiprocessing

    rank_context()
    torch.multiprocessing.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")


def _serve(rank: int, world_size: int, port: int, preload: tuple[str, ...], inbox: Any, outbox: Any) -> None:
    """One rank: import `preload`, join the gloo group, then run `(fn, args)` calls from `inbox` until it reads None."""
    import importlib

    for module in preload:  # the test module: its imports (Lightning) would otherwise count against the first call
        importlib.import_module(module)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    outbox.put((rank, "joined", None))
    while (call := inbox.get()) is not None:
        fn, args = call
        try:
            outbox.put((rank, "ok", fn(rank, world_size, *args)))
        except BaseException:  # noqa: BLE001 - every failure goes back to the test
            outbox.put((rank, "error", traceback.format_exc()))
    dist.barrier()  # no rank tears gloo down under a peer still using it (SIGABRT seen in CI otherwise)
    dist.destroy_process_group()


class GlooRanks:
    """`ranks.run(fn, *args)` calls `fn(rank, world_size, *args)` on every rank; returns the results by rank."""

    def __init__(self, world_size: int = 2, preload: tuple[str, ...] = (), start_timeout: float = 300) -> None:
        ctx = rank_context()
        self.world_size, self.outbox, port = world_size, ctx.Queue(), _free_port()
        self.inboxes = [ctx.Queue() for _ in range(world_size)]
        self.procs = [
            ctx.Process(
                target=_serve, args=(rank, world_size, port, preload, self.inboxes[rank], self.outbox), daemon=True
            )
            for rank in range(world_size)
        ]
        for proc in self.procs:
            proc.start()
        self.broken = ""
        self._collect(start_timeout, "start")

    def _collect(self, timeout: float, what: str) -> list[Any]:
        """Every rank's answer; a rank that died is named at once with how (a signal's name), one still busy after
        `timeout` s as hung."""
        results: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(results) < self.world_size:
            try:
                rank, status, value = self.outbox.get(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                waiting = sorted(set(range(self.world_size)) - set(results))
                dead = [(r, self.procs[r].exitcode) for r in waiting if self.procs[r].exitcode is not None]
                if not dead and time.monotonic() < deadline:
                    continue
                self.broken = (
                    "; ".join(f"rank {r} died in {what} ({_exit_text(code)})" for r, code in dead)
                    or f"ranks {waiting} hung in {what} for over {timeout:.0f} s"
                )
                self.close()
                raise AssertionError(self.broken) from None
            if status == "error":
                self.broken = f"rank {rank} failed in {what}"
                self.close()
                raise AssertionError(f"rank {rank} failed in {what}:\n{value}")
            results[rank] = value
        return [results[rank] for rank in range(self.world_size)]

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float = 30) -> list[Any]:
        if self.broken:
            raise AssertionError(f"the gloo ranks are gone ({self.broken})")
        for inbox in self.inboxes:
            inbox.put((fn, args))
        return self._collect(timeout, fn.__name__)

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for proc in self.procs:
            proc.join(timeout=0 if self.broken else 2)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _exit_text(code: int) -> str:
    """A process's exit code as words: `killed by SIGUSR1` for -10."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def quiet_trainer(root: str | Path, devices: int = 1, strategy: Any = None, **overrides: Any) -> Any:
    """A CPU `pl.Trainer` that writes and prints nothing of its own: no logger, checkpoint callback, progress bar,
    model summary or sanity validation; one epoch; gloo DDP when `devices` > 1 and no `strategy` is given.

    The tests that use it assert on exact steps, collectives, checkpoints and signal timings: a logger or checkpoint
    callback would add its own saves and collectives, a progress bar or summary only noise in 2 ranks' output, and a
    sanity validation batches the tests do not count. `overrides` go to `pl.Trainer` as they are (max_epochs,
    callbacks, plugins, ...)."""
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import DDPStrategy

    if strategy is None and devices > 1:
        strategy = DDPStrategy(process_group_backend="gloo")
    options: dict[str, Any] = dict(
        accelerator="cpu",
        devices=devices,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
    )
    if strategy is not None:
        options["strategy"] = strategy
    return pl.Trainer(**{**options, **overrides})


def tiny_module(rows: int = 64, width: int = 4, train_batch: int = 4) -> Any:
    """A 2-layer regression of `rows` seeded random rows of `width` features, trained in batches of `train_batch` and
    validated in batches of 4 with a rank-synced `val/loss` (a collective in validation, where a signal may land): the
    same data on every run and rank, so step counts and batch indices are exact."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(rows, width, generator=torch.Generator().manual_seed(0)))

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val/loss", self.layer(batch[0]).pow(2).mean(), sync_dist=True)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            return DataLoader(data, batch_size=train_batch)

        def val_dataloader(self) -> Any:
            return DataLoader(data, batch_size=4)

    return Tiny()
