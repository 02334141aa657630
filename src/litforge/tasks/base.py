"""What every litforge LightningModule shares.

The one rule that keeps checkpoints loadable under torch's `weights_only=True` default: hyperparameters are plain
data (dicts of `_target_` configs, numbers, strings, lists). The net, optimizer, scheduler and loss are built
*from* those configs inside the module, never passed in as objects. `load_from_checkpoint(path)` therefore needs
nothing but the file.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from torch import nn

from litforge.errors import CheckpointError, ConfigError

CHECKPOINT_KEY = "litforge"  # extra checkpoint entry: which task class, and the full run config


def call_partial(cfg: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """Build a `_partial_: true` config (optimizer, scheduler, net) with the arguments only the task knows."""
    return instantiate({k: v for k, v in cfg.items() if k != "_partial_"}, *args, **kwargs, _convert_="all")


# keys a model config carries for the task (not constructor arguments of the net): `init_from` names a checkpoint
# whose weights the task loads into the net before training
TASK_KEYS_IN_NET_CONFIG = ("init_from",)


def build_net(net_cfg: dict[str, Any], **shape: Any) -> nn.Module:
    """Instantiate a `_partial_` net config, completing it with the data's shape (in_channels, num_classes, ...)."""
    net_cfg = {k: v for k, v in net_cfg.items() if k not in TASK_KEYS_IN_NET_CONFIG}
    try:
        return call_partial(net_cfg, **shape)
    except Exception as exc:  # hydra wraps constructor errors; surface a user error as itself
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, TypeError) and "unexpected keyword argument" in str(cause):
            # e.g. model=gpt under the image classification task: the net does not take this data's shape
            target = net_cfg.get("_target_", "?")
            raise ConfigError(f"model {target} cannot be built from {sorted(shape)} ({cause}): it belongs to another "
                              "task and data kind; pick a matching set, e.g. an experiment= recipe") from None
        raise


def build_loss(loss_cfg: dict[str, Any] | None, default: type[nn.Module]) -> nn.Module:
    """The `loss=` config's module, or the task's usual loss when the run configures none (e.g. an old checkpoint)."""
    return instantiate(loss_cfg, _convert_="all") if loss_cfg else default()


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


LR_SCALING = ("none", "linear", "sqrt")


def scale_learning_rate(optimizer: torch.optim.Optimizer, scaling: str, replicas: int) -> None:
    """Multiply every group's lr by the number of data-parallel replicas (`linear`) or its square root (`sqrt`).

    N replicas average gradients over an N-times larger global batch; the linear rule (Goyal et al. 2017, and
    Horovod's `lr * hvd.size()`) keeps the per-sample step size. `sqrt` keeps the gradient noise scale (Krizhevsky 2014);
    it suits adaptive optimizers better.
    """
    if scaling not in LR_SCALING:
        raise ConfigError(f"optimizer.lr_scaling={scaling!r} is not one of {', '.join(LR_SCALING)}")
    factor = {"none": 1.0, "linear": float(replicas), "sqrt": float(replicas) ** 0.5}[scaling]
    if factor != 1.0:
        for group in optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor


class LitforgeTask(pl.LightningModule):
    """Optimizer and LR scheduler from configs, checkpoint metadata, and RNG state for exact resume."""

    #: what `datamodule.kind` this task consumes; checked before training so a wrong pair fails early
    data_kind: str = "image"

    def __init__(self, optimizer: dict[str, Any], scheduler: dict[str, Any] | None = None,
                 run_config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.optimizer_cfg = optimizer
        self.scheduler_cfg = scheduler or None
        # the composed run config, stored in checkpoints so eval/predict/export need only the checkpoint path
        self.run_config = run_config
        # steps_per_call > 1 (set by litforge.steps_per_call): optimizer steps per Lightning training step
        self.steps_per_call = 1
        self.micro_batch_size = 0
        self.gradient_clip: tuple[float | None, str] = (None, "norm")
        self.scheduler_monitor: str | None = None

    # ---- optimisation ---------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        params = trainable_parameters(self)
        if not params:
            raise ConfigError("the model has no trainable parameters: check the freezing options of the task")
        optimizer_cfg = dict(self.optimizer_cfg)
        scaling = optimizer_cfg.pop("lr_scaling", None) or "none"
        optimizer = call_partial(optimizer_cfg, params)
        scale_learning_rate(optimizer, scaling, self._data_parallel_size())
        if not self.scheduler_cfg:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self._build_scheduler(optimizer)}

    def _data_parallel_size(self) -> int:
        """Model replicas that each see different data (DDP ranks; the data-parallel part of an FSDP/TP mesh)."""
        trainer = self._trainer
        sampler = trainer.distributed_sampler_kwargs if trainer is not None else None
        return int(sampler["num_replicas"]) if sampler else 1

    def configure_model(self) -> None:
        """Shard the net over the device mesh (only under ModelParallelStrategy: strategy=fsdp, tp, fsdp_tp).

        Lightning calls this hook before building optimizers, and also from `load_from_checkpoint` with no mesh.
        """
        if self.device_mesh is None:
            return
        net = getattr(self, "net", None)
        if not isinstance(net, nn.Module):
            raise ConfigError(f"{type(self).__name__} keeps no `net` to shard: use strategy=ddp for this task")
        from litforge.parallel.plans import shard

        shard(net, self.device_mesh)

    def _build_scheduler(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Build the scheduler, filling the lengths the config leaves as null from the trainer's run length."""
        cfg = dict(self.scheduler_cfg or {})
        interval = cfg.pop("interval", "epoch")
        monitor = cfg.pop("monitor", None)
        frequency = cfg.pop("frequency", 1)
        sched_cfg = dict(cfg.pop("scheduler"))
        total = self._schedule_length(interval)
        for key in ("T_max", "total_steps"):  # cosine, onecycle
            if key in sched_cfg and sched_cfg[key] is None:
                sched_cfg[key] = total
        if "max_lr" in sched_cfg and sched_cfg["max_lr"] is None:  # onecycle: peak at the configured lr
            sched_cfg["max_lr"] = [group["lr"] for group in optimizer.param_groups]
        scheduler = call_partial(sched_cfg, optimizer)
        out: dict[str, Any] = {"scheduler": scheduler, "interval": interval, "frequency": frequency}
        self.scheduler_monitor = monitor  # under manual optimization (steps_per_call > 1) Lightning drops `monitor`
        if monitor and self.automatic_optimization:
            out["monitor"] = monitor
        return out

    def _schedule_length(self, interval: str) -> int:
        trainer = self.trainer
        if interval == "step":
            steps = int(trainer.estimated_stepping_batches)
            if self.steps_per_call > 1:  # Lightning counts loaded batches; each holds up to steps_per_call steps
                steps = self._optimizer_steps_per_epoch() * max(1, trainer.max_epochs or 1)
                if trainer.max_steps > 0:
                    steps = min(steps, trainer.max_steps)
            return max(1, steps)
        if trainer.max_epochs is None or trainer.max_epochs < 0:
            raise ConfigError("an epoch-based LR schedule needs trainer.max_epochs (or set the schedule length)")
        return max(1, trainer.max_epochs)

    # ---- several optimizer steps per training step (steps_per_call > 1) -------------------------------------------
    def use_steps_per_call(self, steps: int, micro_batch_size: int, clip_val: float | None, clip_algorithm: str) -> None:
        """Run `steps` optimizer steps per Lightning training step, each on `micro_batch_size` samples of the batch.

        The same idea as Keras' `steps_per_execution`: Lightning's per-step machinery (hooks of every callback,
        progress tracking, logging) costs ~2,000 Python calls, more than a small net's whole step; paid once per
        `steps` optimizer steps it nearly vanishes. The optimization loop below is what Lightning's automatic
        optimization does on one device, written out: forward, backward, gradient clipping, optimizer step, and
        step-interval schedulers; `trainer.global_step` still counts optimizer steps.
        """
        self.steps_per_call, self.micro_batch_size = steps, micro_batch_size
        self.gradient_clip = (clip_val, clip_algorithm)
        self.automatic_optimization = False

    def _optimizer_steps_per_epoch(self) -> int:
        """Optimizer steps in one epoch when each loaded batch holds `steps_per_call` of them (the last may hold fewer).

        Exact, so that a schedule sized to the run (onecycle's total_steps, cosine's T_max) matches steps_per_call=1.
        """
        trainer = self.trainer
        calls = int(trainer.num_training_batches)  # after estimated_stepping_batches, which sets up the loader
        loader = trainer.train_dataloader
        samples = getattr(loader, "num_samples", None) or len(getattr(loader, "dataset", None) or ())
        if not samples or calls < -(-samples // (self.steps_per_call * self.micro_batch_size)):
            return calls * self.steps_per_call  # limit_train_batches cut the epoch: every loaded batch is full
        return -(-samples // self.micro_batch_size)

    def steps_on_batch(self, batch: tuple[torch.Tensor, ...], step_loss: Any) -> torch.Tensor:
        """Optimizer steps on consecutive `micro_batch_size` slices of `batch`; returns the loss of each step.

        `step_loss(micro_batch)` is the task's loss of one step. Calls to the raw optimizer skip Lightning's per-step
        hooks (which is the point); the LightningOptimizer's step counters are advanced around each step so that
        `global_step`, `max_steps` and checkpoint names count optimizer steps.
        """
        lightning_optimizer = self.optimizers()
        optimizer = lightning_optimizer.optimizer
        trainer = self.trainer
        step_schedulers = [c for c in trainer.lr_scheduler_configs if c.interval == "step"]
        clip_val, clip_algorithm = self.gradient_clip
        params = [p for group in optimizer.param_groups for p in group["params"]] if clip_val else []
        losses = []
        for micro in zip(*(t.split(self.micro_batch_size) for t in batch)):
            if 0 < trainer.max_steps <= self.global_step:
                break  # the step budget ends inside this batch
            loss = step_loss(micro)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip_val:
                if clip_algorithm == "value":
                    torch.nn.utils.clip_grad_value_(params, clip_val)
                else:
                    torch.nn.utils.clip_grad_norm_(params, clip_val)
            lightning_optimizer._on_before_step()
            optimizer.step()
            lightning_optimizer._on_after_step()
            for config in step_schedulers:
                if self.global_step % config.frequency == 0:
                    self.lr_scheduler_step(config.scheduler, None)
            losses.append(loss.detach())
        # the loggers' x-axis: Lightning advances it by one per training step; make it count optimizer steps, as with
        # steps_per_call=1 (so curves of runs with different steps_per_call line up, and match checkpoint names)
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if hasattr(epoch_loop, "_batches_that_stepped"):
            epoch_loop._batches_that_stepped += len(losses) - 1
        return torch.stack(losses)

    def step_epoch_schedulers(self) -> None:
        """Epoch-interval schedulers: Lightning steps them only under automatic optimization (steps_per_call = 1)."""
        if self.automatic_optimization or self._trainer is None:
            return
        trainer = self.trainer
        for config in trainer.lr_scheduler_configs:
            if config.interval != "epoch" or (trainer.current_epoch + 1) % config.frequency:
                continue
            metric = None
            if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                metric = trainer.callback_metrics.get(self.scheduler_monitor)
                if metric is None:
                    raise ConfigError(f"scheduler.monitor={self.scheduler_monitor} is not logged by this run; logged: "
                                      f"{', '.join(sorted(trainer.callback_metrics))}")
            self.lr_scheduler_step(config.scheduler, metric)

    def on_train_epoch_end(self) -> None:
        self.step_epoch_schedulers()

    def on_train_start(self) -> None:
        if self.steps_per_call > 1 and self.trainer.world_size > 1:  # e.g. trainer.devices=2 picked DDP
            raise ConfigError(f"steps_per_call={self.steps_per_call} runs on one device, but this run has "
                              f"{self.trainer.world_size} processes: set steps_per_call=1 for multi-device training")

    # ---- logging ---------------------------------------------------------------------------------------------------
    def logs_this_step(self) -> bool:
        """Whether Lightning writes step metrics to the loggers after this training step.

        True every `trainer.log_every_n_steps` steps (and in `fast_dev_run`): step metrics logged on other steps
        are never written anywhere, yet each `self.log` call costs hundreds of Python calls. Outside a trainer, or
        if Lightning's internals change, it answers True (log every step: correct, only slower).
        """
        trainer = self._trainer
        if trainer is None:
            return True
        if trainer.fast_dev_run:
            return True
        return bool(getattr(getattr(trainer, "_logger_connector", None), "should_update_logs", True))

    # ---- checkpoints ----------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        cls = type(self)
        checkpoint[CHECKPOINT_KEY] = {
            "task_class": f"{cls.__module__}.{cls.__qualname__}",
            "run_config": self.run_config,
            # global RNG state: dropout and augmentation draw from it, so an exact resume needs it back
            "rng": {"torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng = checkpoint.get(CHECKPOINT_KEY, {}).get("rng")
        if rng and self._trainer is not None and self.trainer.state.fn == "fit":
            torch.set_rng_state(rng["torch"])
            if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(rng["cuda"])


def task_class_from_checkpoint(checkpoint: dict[str, Any], path: str) -> type[LitforgeTask]:
    """The task class recorded in a checkpoint; only litforge task classes are accepted."""
    meta = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(meta, dict) or "task_class" not in meta:
        raise CheckpointError(f"{path} is a PyTorch file but not a litforge checkpoint (no '{CHECKPOINT_KEY}' entry): "
                              "pass a .ckpt written by `python train.py` (e.g. logs/train/runs/<run>/checkpoints/last.ckpt)")
    module_name, _, class_name = meta["task_class"].rpartition(".")
    if not module_name.startswith("litforge.tasks"):
        raise CheckpointError(f"{path} names task class {meta['task_class']!r}, which is not a litforge task")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, LitforgeTask)):
        raise CheckpointError(f"{path} names task class {meta['task_class']!r}, which is not a litforge task")
    return cls


def restore_task(checkpoint: dict[str, Any], path: str) -> LitforgeTask:
    """Rebuild the task a checkpoint was trained as, from its plain-data hparams, and load its weights."""
    from litforge.checkpoints import check_trusted_targets

    cls = task_class_from_checkpoint(checkpoint, path)
    hparams = dict(checkpoint.get("hyper_parameters", {}))
    check_trusted_targets(hparams, path, "task")  # the task builds its net and loss from these
    try:
        task = cls(**hparams)
    except TypeError as exc:
        raise CheckpointError(f"{path} does not match this version of {cls.__name__}: {exc}") from None
    task.on_load_checkpoint(checkpoint)
    missing, unexpected = task.load_state_dict(checkpoint["state_dict"], strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit {cls.__name__} (missing: {missing[:3]}, unexpected: "
                              f"{unexpected[:3]}); was it written by another version of the model?")
    return task.eval()
