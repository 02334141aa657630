"""Two small subclasses of Lightning strategies, each fixing one thing the stock class cannot do here.

- :class:`ModelParallel`: Lightning's `ModelParallelStrategy` reads `data_parallel_size: auto` as "the number of
  nodes", so FSDP over 2 processes on one machine would need the size spelled out. The training job fills `auto`
  with whatever the other dimension leaves of the world size (:func:`explicit_mesh_sizes`) before building it, so
  `strategy=fsdp trainer.devices=N` works for any N.
  Its sharded checkpoint saves are atomic (:meth:`ModelParallel.save_checkpoint`).
- :class:`LocalSGD`: post-local SGD (Lin et al. 2020, "Don't use large mini-batches, use local SGD"): synchronous
  DDP for `warmup_steps`, then every rank steps on its own gradients and the models are averaged every `period`
  steps. Lightning's `DDPStrategy` supports this only on CUDA: it registers DDP communication hooks only for CUDA
  devices (silently dropping them otherwise) and torch's default post-local state builds per-node subgroups from
  the CUDA device count. This subclass registers the hook on any device (through DDP's public `register_comm_hook`)
  and makes the post-warm-up steps purely local, which is what lets it run (and be tested) on CPU with gloo.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from omegaconf import DictConfig
from pytorch_lightning.strategies import DDPStrategy, ModelParallelStrategy
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

from litforge.checkpointing.consolidate import META
from litforge.checkpointing.io import fsync_directory
from litforge.checkpointing.resume import previous_of
from litforge.core.bounds import Count, NonNegativeInt
from litforge.core.errors import ConfigError

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import Strategy


def attached_module(strategy: Strategy) -> pl.LightningModule:
    """The task `strategy` trains. Lightning types `Strategy.lightning_module` as Optional (None until the Trainer
    connects a task) but calls the hooks that use it only after connecting one: a None here is a broken call order."""
    module = strategy.lightning_module
    if module is None:
        raise RuntimeError(f"{type(strategy).__name__}: no LightningModule connected yet (the Trainer connects it)")
    return module


def explicit_mesh_sizes(node: DictConfig, world: int) -> dict[str, int]:
    """The mesh sizes a strategy config leaves `auto`, filled from the `world` size: dp = world / tp, tp = world / dp
    (Lightning's own `auto` means "the number of nodes" for dp). Empty when nothing is `auto`."""
    dp, tp = node.get("data_parallel_size"), node.get("tensor_parallel_size")
    if dp == "auto" and tp not in (None, "auto"):
        return {"data_parallel_size": max(1, world // int(tp))}
    if tp == "auto" and dp not in (None, "auto"):
        return {"tensor_parallel_size": max(1, world // int(dp))}
    return {}


class BuildsOnMeta:
    """A strategy whose ranks build the net on the meta device unless its `meta_init` is off: ModelParallel (each
    rank then gives storage to its shards only) and Pipeline (its stages only); litforge.parallel.meta_init."""

    meta_init: bool


class ModelParallel(BuildsOnMeta, ModelParallelStrategy):
    """`ModelParallelStrategy` with explicit mesh sizes (`auto` filled by :func:`explicit_mesh_sizes`); plus the FSDP2
    options of `strategy=fsdp|fsdp_tp` (:meth:`fsdp_kwargs`, applied by litforge.parallel.plans.shard).

    Lightning's strategy exposes none of FSDP2's options: the task's `configure_model` calls `fully_shard` itself,
    so the options travel from this config to there through the strategy object.
    """

    strategy_name = "litforge_model_parallel"

    def __init__(
        self,
        data_parallel_size: Count | Literal["auto"] = "auto",
        tensor_parallel_size: Count | Literal["auto"] = "auto",
        mixed_precision: Literal["bf16"] | None = None,
        reshard_after_forward: bool = True,
        offload: Literal["cpu"] | None = None,  # FSDP2's CPUOffloadPolicy pins memory: GPU machines only
        replicate_size: Count = 1,  # HSDP replicas (its relation to tensor_parallel_size: config.relations)
        meta_init: bool = True,
        **kwargs: Any,
    ) -> None:
        if offload == "cpu" and not torch.cuda.is_available():
            # CPUOffloadPolicy pins host memory, which needs a CUDA driver ("Found no NVIDIA driver" mid-setup)
            raise ConfigError(
                "strategy.offload=cpu moves sharded parameters to pinned host memory between uses and "
                "needs CUDA GPUs; this machine has none: use strategy.offload=null"
            )
        kwargs.update(data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size)
        super().__init__(**kwargs)
        self.sharded_saves = bool(kwargs.get("save_distributed_checkpoint", True))
        self.mixed_precision, self.reshard_after_forward, self.offload = mixed_precision, reshard_after_forward, offload
        self.replicate_size = replicate_size
        self.meta_init = meta_init  # read by the train job: build the net on meta (litforge.parallel.meta_init)

    def fsdp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for every `fully_shard` call: FSDP2's mixed precision, resharding and offload policies."""
        kwargs: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward}
        if self.mixed_precision == "bf16":
            # weights gathered and computed in bf16 (half the all-gather bytes and activation memory); gradients
            # reduced and kept in fp32 (the optimizer updates fp32 shards); the root's outputs are cast back to
            # fp32 for the loss (litforge.parallel.plans.apply_fsdp)
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if self.offload == "cpu":
            kwargs["offload_policy"] = CPUOffloadPolicy()
        if self.replicate_size > 1:
            kwargs["replicate_size"] = self.replicate_size  # HSDP: litforge.parallel.plans.shard builds the 2-D mesh
        return kwargs

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: object = None) -> None:
        """Write a sharded checkpoint atomically: a kill at any moment leaves the previous folder loadable.

        Lightning's save writes the shards *into* the existing folder (torch.distributed.checkpoint overwrites each
        rank's file in place; only its `.metadata` index goes through a temporary name), and rank 0 writes `meta.pt`
        after the shards: a kill mid-save left `last.ckpt` a mix of two steps, or of new shards and an old `meta.pt`.
        DCP offers no folder-level transaction, so here every rank writes into `.<name>.partial` beside the target;
        once all ranks are done (a barrier), rank 0 moves the old folder to `.<name>.previous`, renames the new one
        into place, fsyncs the parent folder and deletes the old one. A kill between those two renames leaves no
        `<name>`, and `resume=auto` then takes `.<name>.previous`, whole (litforge.checkpointing.resume.run_checkpoint).
        """
        if not self.sharded_saves or "://" in str(filepath):  # one gathered file (atomic plugin) or an object store
            return super().save_checkpoint(checkpoint, filepath, storage_options)

        target = Path(self.broadcast(str(filepath)))
        partial = target.with_name(f".{target.name}.partial")
        if self.global_rank == 0:
            shutil.rmtree(partial, ignore_errors=True)  # what a kill during an earlier save left
            partial.parent.mkdir(parents=True, exist_ok=True)
        self.barrier()
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier()  # every rank's shards and the index are written (DCP fsyncs them); rank 0's meta.pt too
        if self.global_rank == 0:
            with open(partial / META, "rb") as handle:
                os.fsync(handle.fileno())
            fsync_directory(partial)
            previous = previous_of(target)
            if target.exists():
                _remove(previous)
                os.replace(target, previous)
            os.replace(partial, target)
            fsync_directory(target.parent)
            _remove(previous)
        self.barrier()

    def setup_environment(self) -> None:
        world = self.num_processes * self.num_nodes
        if self.replicate_size > 1 and world % self.replicate_size:
            raise ConfigError(
                f"strategy.replicate_size={self.replicate_size} does not divide the {world} processes "
                "into equal shard groups: use a divisor of trainer.devices x trainer.num_nodes"
            )
        super().setup_environment()


def _remove(path: Path) -> None:
    """Delete a checkpoint folder or file if it exists."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


class LocalSGD(DDPStrategy):
    """DDP with post-local-SGD model averaging every `period` optimizer steps, after `warmup_steps` synchronous ones."""

    strategy_name = "litforge_local_sgd"

    def __init__(
        self,
        period: Count = 4,
        warmup_steps: NonNegativeInt = 0,
        find_unused_parameters: bool = False,
        **kwargs: Any,
    ) -> None:

        # post_local_gradient_allreduce=False: after warm-up each rank uses its own gradients (no per-node subgroup,
        # which torch would size from the CUDA device count); the averager is then the only communication.
        # process_group=None: the default group, created later by setup_distributed.
        self.comm_state = PostLocalSGDState(
            process_group=None, subgroup=None, start_localSGD_iter=warmup_steps, post_local_gradient_allreduce=False
        )
        super().__init__(
            model_averaging_period=period,
            ddp_comm_state=self.comm_state,
            ddp_comm_hook=post_localSGD_hook,
            find_unused_parameters=find_unused_parameters,
            **kwargs,
        )
        self.warmup_steps = warmup_steps

    def configure_ddp(self) -> None:
        """Wrap the model in DDP; on CPU (gloo) register the post-local SGD hook that Lightning registers on CUDA
        only."""
        super().configure_ddp()
        if self.root_device.type != "cuda":
            # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
            self.model.register_comm_hook(self.comm_state, post_localSGD_hook)  # type: ignore[operator,union-attr]
