"""The contract kit's data-parallel check: 2 real gloo DDP ranks end where one process ends on the whole batch.

Why it holds: the training loaders shard each global batch over the data-parallel ranks (litforge.InMemoryLoader
gives rank r its contiguous part of the batch one process would take), and DDP averages the ranks' gradients, so N
ranks at `data.batch_size` B take the steps of one process at N x B. What differs between ranks by construction is
held still in both runs alike: dropout masks (each rank draws its own) and BatchNorm's batch statistics (each rank
normalises its own part), by keeping those modules in eval mode while training (:class:`Comparable`). Other
per-rank randomness is the config's to turn off for this check (`data.augment=none`, `task.mix=none`). The ranks are
two spawned processes, each building the datamodule and the task from the config as `litforge train` does and
fitting under Lightning's DDPStrategy with gloo on the CPU.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import traceback
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.strategies import DDPStrategy
from torch import nn

import litforge.runtime.ranks  # noqa: F401  (the config's resolvers)
from litforge.testing.checks import build, first_difference, fit, max_diff, prepared, quiet_trainer, weights

WORLD_SIZE = 2
ATOL = 1e-5  # gloo sums two half-batch gradients in another order than one process sums the whole batch


def comparable() -> pl.Callback:
    """The callback that keeps dropout and BatchNorm modules in eval mode on every training batch (Lightning puts
    the whole module in train mode at each epoch's start)."""
    # torch's public dropout and batch-norm classes (their common bases are private)
    dropout = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    STOCHASTIC: tuple[type[nn.Module], ...] = (
        *dropout,
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.BatchNorm3d,
        nn.SyncBatchNorm,
    )

    class Comparable(pl.Callback):
        def on_train_batch_start(
            self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
        ) -> None:
            for module in pl_module.modules():
                if isinstance(module, STOCHASTIC):
                    module.eval()

    return Comparable()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_rank(rank: int, port: int, cfg_yaml: str, steps: int, out: str) -> None:
    """One DDP rank (a spawned process): build from the config, fit `steps` steps, rank 0 saves the weights."""
    try:
        torch.set_num_threads(1)
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            NODE_RANK="0",
            WORLD_SIZE=str(WORLD_SIZE),
        )

        cfg = OmegaConf.create(cfg_yaml)
        assert isinstance(cfg, DictConfig)
        datamodule, task = build(cfg)
        trainer = quiet_trainer(
            cfg.paths.output_dir,
            steps=steps,
            callbacks=[comparable()],
            devices=WORLD_SIZE,
            strategy=DDPStrategy(process_group_backend="gloo"),
        )
        fit(trainer, task, datamodule)
        if rank == 0:
            torch.save(weights(task), out)
    except BaseException:  # noqa: BLE001 - the parent reports it
        Path(f"{out}.rank{rank}.error").write_text(traceback.format_exc())
        raise


def check_ddp_matches_single_process(
    cfg: DictConfig, tmp_path: str | Path, steps: int = 2, timeout: float = 300
) -> None:
    """`steps` optimizer steps on 2 gloo DDP ranks at `data.batch_size` B give the weights of `steps` steps of one
    process at 2 x B (within 1e-5), dropout and BatchNorm held in eval mode in both."""
    tmp = Path(tmp_path)
    if "batch_size" not in cfg.data:
        raise AssertionError("the data config has no `batch_size`: the check doubles it for the single process")
    per_rank = int(cfg.data.batch_size)
    single_cfg = prepared(cfg, tmp, "single", **{"data.batch_size": WORLD_SIZE * per_rank})
    datamodule, task = build(single_cfg)
    fit(quiet_trainer(single_cfg.paths.output_dir, steps=steps, callbacks=[comparable()]), task, datamodule)
    single = weights(task)

    ranks_cfg = prepared(cfg, tmp, "ranks")
    out = str(tmp / "ranks" / "weights.pt")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    cfg_yaml = OmegaConf.to_yaml(ranks_cfg)
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=run_rank, args=(r, port, cfg_yaml, steps, out), daemon=True) for r in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout)
    hung = [r for r, proc in enumerate(procs) if proc.is_alive()]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    errors = sorted(Path(out).parent.glob("weights.pt.rank*.error"))
    if errors:
        trace = errors[0].read_text().strip().splitlines()
        raise AssertionError(f"DDP {errors[0].name.split('.')[-2]} failed: {trace[-1] if trace else '?'}")
    assert not hung, f"DDP ranks {hung} still ran after {timeout:.0f} s"
    assert all(proc.exitcode == 0 for proc in procs), f"DDP ranks exited {[p.exitcode for p in procs]}"
    ddp = torch.load(out, weights_only=True)
    for name, tensor in single.items():
        other = ddp.get(name)
        if other is None or other.shape != tensor.shape:
            raise AssertionError(f"the DDP run has no {name} of shape {tuple(tensor.shape)}")
        if tensor.is_floating_point() and not torch.allclose(tensor, other, atol=ATOL, rtol=0):
            raise AssertionError(
                f"after {steps} steps, 2 DDP ranks at batch {per_rank} differ from one process at batch "
                f"{WORLD_SIZE * per_rank} in {name} by {max_diff(tensor, other):.2e} (> {ATOL})"
            )
    if first_difference({k: v for k, v in single.items() if not v.is_floating_point()}, ddp) is not None:
        raise AssertionError("the DDP run's integer buffers differ from one process's")
