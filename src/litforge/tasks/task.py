"""What every litforge LightningModule shares.

The one rule that keeps checkpoints loadable under torch's `weights_only=True` default: hyperparameters are plain
data (dicts of `_target_` configs, numbers, strings, lists). The net, optimizer, scheduler and loss are built
*from* those configs inside the module, never passed in as objects. `load_from_checkpoint(path)` therefore needs
nothing but the file.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from hydra.utils import instantiate
from pydantic import TypeAdapter, ValidationError
from torch import nn

from litforge.checkpointing.load import CHECKPOINT_KEY  # the entry this task writes: task class, run config
from litforge.core.contracts import ConfiguresFsdp, net_of, no_predicted, steps_through_step_loss
from litforge.core.errors import ConfigError
from litforge.core.hparams import HparamsAtFitStart
from litforge.core.instantiate import call_partial
from litforge.loops.steps_per_call import optimizer_steps_in_run
from litforge.parallel.clipping import clip_grad_norm, has_dtensor_grads
from litforge.parallel.meta_init import is_meta, materialize
from litforge.parallel.net_options import NetOptions, prepare_net
from litforge.parallel.plans import shard
from litforge.runtime.host_reads import StepLosses, Where, host_scalar, writes_step_metrics


def build_loss(loss_cfg: dict[str, Any] | None, default: type[nn.Module]) -> nn.Module:
    """The `loss=` config's module, or the task's usual loss when the run configures none (e.g. an old checkpoint)."""
    return instantiate(loss_cfg, _convert_="all") if loss_cfg else default()


def compare_by_argmax(reference: torch.Tensor, exported: torch.Tensor) -> dict[str, float]:
    """`max_abs_diff` and the share of samples whose largest output is the same one (`agreement`)."""
    diff = float((exported - reference).abs().max()) if reference.numel() else 0.0
    return {"max_abs_diff": diff, "agreement": float((exported.argmax(-1) == reference.argmax(-1)).float().mean())}


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


LR_SCALING = ("none", "linear", "sqrt")


def scale_learning_rate(optimizer: torch.optim.Optimizer, scaling: str, replicas: int) -> None:
    """Multiply every group's lr by the number of data-parallel replicas (`linear`) or its square root (`sqrt`).

    N replicas average gradients over an N-times larger global batch; the linear rule (Goyal et al. 2017, and
    Horovod's `lr * hvd.size()`) keeps the per-sample step size. `sqrt` keeps the gradient noise scale (Krizhevsky
    2014); it suits adaptive optimizers better.
    """
    if scaling not in LR_SCALING:
        raise ConfigError(f"task.lr_scaling={scaling!r} is not one of {', '.join(LR_SCALING)}")
    factor = {"none": 1.0, "linear": float(replicas), "sqrt": float(replicas) ** 0.5}[scaling]
    if factor != 1.0:
        for group in optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor


def attached_trainer(module: pl.LightningModule) -> pl.Trainer | None:
    """The Trainer `module` is attached to, or None (a task built for eval, predict or a notebook): Lightning's
    public `trainer` property raises instead of answering None."""
    try:
        return module.trainer
    except RuntimeError:
        return None


class LitforgeTask(HparamsAtFitStart, pl.LightningModule):
    """Optimizer and LR scheduler from configs, checkpoint metadata, and RNG state for exact resume."""

    #: what `datamodule.kind` this task consumes; checked before training so a wrong pair fails early
    data_kind: str | tuple[str, ...] = "image"

    #: The settings that decide what the trained net's outputs become, not how it learns (a classifier's
    #: `threshold`): constructor arguments, kept as attributes of the same name, that eval, predict and export may
    #: change on a trained task (`litforge predict ckpt_path=... task.threshold=0.3`, :meth:`set_decisions`).
    decisions: tuple[str, ...] = ()

    #: What predict and export name columns by (litforge.core.contracts.PredictTask, ExportTask): a class name per
    #: class index, a name per predicted value, per input feature; None = numbered.
    class_names: list[str] | None = None
    target_names: list[str] | None = None
    feature_names: list[str] | None = None  # the encoded input columns of features data (export's metadata)
    run_config: dict[str, Any] | None  # the composed run config (set in __init__; tune=batch_size updates it)
    #: what the training job asks of the net, applied by :meth:`configure_model` (none for eval, predict, export)
    net_options: NetOptions = NetOptions()
    net_prepared: bool = False

    def __init__(
        self,
        optimizer: dict[str, Any],
        scheduler: dict[str, Any] | None = None,
        run_config: dict[str, Any] | None = None,
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",  # the lr x data-parallel replicas: none | linear | sqrt
    ) -> None:
        super().__init__()
        self.optimizer_cfg = optimizer
        self.scheduler_cfg = scheduler or None
        self.lr_scaling = lr_scaling
        # the composed run config, stored in checkpoints so eval/predict/export need only the checkpoint path
        self.run_config = run_config
        # training losses kept on the device, read once per logging step (litforge.runtime.host_reads)
        self.step_losses = StepLosses()
        self.step_at_batch_start = 0  # the global step as the current training batch began (on_train_batch_start)

    def set_decisions(self, values: Mapping[str, Any], job: str) -> None:
        """Set `job`'s `task.<name>=<value>` keys on this trained task: each a declared decision, checked against its
        constructor annotation, and recorded in the hparams (what eval's metrics and export's metadata report).
        Anything else is refused in one line naming the decisions there are: a key the task would not read must not
        pass silently."""
        hints: dict[str, Any] = {}  # a subclass passing **kwargs on keeps its parents' decisions: all constructors
        for cls in reversed([c for c in type(self).__mro__ if "__init__" in vars(c) and issubclass(c, LitforgeTask)]):
            hints |= typing.get_type_hints(cls.__init__, include_extras=True)
        name_of = type(self).__name__
        wrong = [d for d in self.decisions if d not in hints] if isinstance(self.decisions, tuple) else self.decisions
        if wrong:  # a decision is a constructor argument: the checkpoint rebuilds the task from them
            raise ConfigError(
                f"{job}: task `{name_of}` declares `decisions = {self.decisions!r}`, but {wrong!r} is not an annotated "
                "argument of its constructor: `decisions` is a tuple of such names, e.g. ('threshold',)"
            )
        for name, value in values.items():
            if name not in self.decisions:
                declared = ", ".join(f"task.{d}" for d in self.decisions) or "none"
                raise ConfigError(
                    f"task.{name}={value}: task `{name_of}` declares no decision `{name}`; {job} may set only the "
                    f"decisions of the checkpoint's task ({declared}: its class attribute `decisions`)"
                )
            try:
                value = TypeAdapter(hints.get(name, Any)).validate_python(value, strict=True)
            except ValidationError as exc:
                problem = exc.errors()[0]["msg"]
                raise ConfigError(f"task.{name}={value}: {problem[0].lower()}{problem[1:]}") from None
            setattr(self, name, value)
            self.hparams[name] = value

    def deployable_net(self) -> nn.Module:
        """What export converts (litforge.core.contracts.ExportTask): the net, from the task's input to its output;
        a task that applies something after its net overrides this (regression: the target scale)."""
        net = net_of(self)
        if not isinstance(net, nn.Module):
            raise ConfigError(f"{type(self).__name__} keeps no `net` to export (litforge.ExportTask)")
        return net

    def decision_values(self) -> dict[str, Any]:
        """The decisions this task applies now (for export's metadata)."""
        return {name: self.hparams.get(name) for name in self.decisions}

    # ---- what predict writes and export compares (litforge.core.contracts.WritesPredictions, ComparesOutputs) ----
    def prediction_rows(self, out: Mapping[str, torch.Tensor]) -> list[dict[str, str | int | float]]:
        """One row per sample of `predict_step`'s output: with `confidence`, a class (`predicted`, its `class_name`,
        `confidence`; a negative class is none, e.g. below task.threshold); else one column per predicted value,
        named by `target_names`. A task of another shape (several labels, text) overrides this."""
        if "predicted" not in out:
            raise no_predicted(type(self).__name__, f"a mapping of {sorted(out)}", "predict")
        predicted, names = out["predicted"], self.class_names
        if "confidence" in out:
            return [
                {
                    "predicted": p,
                    **({"class_name": names[p] if p >= 0 else ""} if names else {}),
                    "confidence": round(c, 6),
                }
                for p, c in zip(predicted.tolist(), out["confidence"].tolist(), strict=True)
            ]
        values = predicted.reshape(len(predicted), -1).tolist()
        columns = self.target_names or [f"predicted_{i}" for i in range(len(values[0]))]
        return [{name: round(v, 6) for name, v in zip(columns, row, strict=True)} for row in values]

    def answer_columns(self, target: torch.Tensor) -> dict[str, str | int | float]:
        """The known answer of one test sample beside its prediction: `label` for a class index, else `true_<name>`
        per value (the columns predict's accuracy and mae compare)."""
        if target.ndim == 0 and not target.is_floating_point():
            return {"label": int(target)}
        columns = self.target_names or [f"predicted_{i}" for i in range(target.numel())]
        return {f"true_{n}": round(float(v), 6) for n, v in zip(columns, target.reshape(-1).tolist(), strict=True)}

    def compare_outputs(self, reference: torch.Tensor, exported: torch.Tensor) -> dict[str, float]:
        """Export's parity figures: the largest output difference, and the share of samples whose argmax agrees."""
        return compare_by_argmax(reference, exported)

    # ---- optimisation ---------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        params = trainable_parameters(self)
        if not params:
            raise ConfigError("the model has no trainable parameters: check the freezing options of the task")
        optimizer_cfg = dict(self.optimizer_cfg)
        optimizer_cfg.pop("lr_scaling", None)  # where checkpoints written before it moved to task.lr_scaling keep it
        optimizer = call_partial("optimizer", optimizer_cfg, params)
        scale_learning_rate(optimizer, self.lr_scaling, self._data_parallel_size())
        if not self.scheduler_cfg:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self._build_scheduler(optimizer)}

    def set_learning_rate(self, lr: float) -> None:
        """Build the optimizer with `lr` from now on (the lr finder's suggestion, `tune=lr_find`).

        The optimizer is built from `optimizer_cfg` in `configure_optimizers`, so that is where the lr must change
        (Lightning's finder would look for an `lr` attribute this task does not use); the hparams and the stored run
        config change with it, so checkpoints, hparams.yaml and eval say which lr trained the weights.
        """
        self.optimizer_cfg = {**self.optimizer_cfg, "lr": float(lr)}
        if "optimizer" in self.hparams:
            self.hparams["optimizer"] = self.optimizer_cfg
        if isinstance(self.run_config, dict) and isinstance(self.run_config.get("optimizer"), dict):
            self.run_config = {**self.run_config, "optimizer": {**self.run_config["optimizer"], "lr": float(lr)}}

    def _data_parallel_size(self) -> int:
        """Model replicas that each see different data (DDP ranks; the data-parallel part of an FSDP/TP mesh)."""
        trainer = attached_trainer(self)
        sampler = trainer.distributed_sampler_kwargs if trainer is not None else None
        return int(sampler["num_replicas"]) if sampler else 1

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip by the global norm of every gradient when some are sharded (fsdp, tp, fsdp_tp, hsdp): torch's
        `clip_grad_norm_`, which Lightning calls, fails on a mix of DTensor and plain gradients or of two meshes
        (litforge.parallel.clipping). Unsharded runs keep Lightning's own clipping."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and has_dtensor_grads(params):
            clip_grad_norm(params, float(gradient_clip_val))
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_model(self) -> None:
        """Prepare the net as the run asks (:attr:`net_options`: float8, activation checkpointing, compile,
        channels_last; litforge.parallel.net_options), then shard it over the device mesh (only under
        ModelParallelStrategy: strategy=fsdp, tp, fsdp_tp).

        Lightning calls this hook before it wraps the module and builds the optimizers, at each of fit, validate, test
        and predict (the net is prepared once), and also from `load_from_checkpoint` with no mesh.
        """
        if not self.net_prepared:
            prepare_net(net_of(self), self.net_options, type(self).__name__)
            self.net_prepared = True
        if self.device_mesh is None:
            return
        net = net_of(self)
        if not isinstance(net, nn.Module):
            raise ConfigError(f"{type(self).__name__} keeps no `net` to shard: use strategy=ddp for this task")

        strategy = self.trainer.strategy if attached_trainer(self) is not None else None
        # strategy=fsdp|fsdp_tp options (mixed precision, ...)
        shard(net, self.device_mesh, strategy.fsdp_kwargs() if isinstance(strategy, ConfiguresFsdp) else None)

        if is_meta(net):  # built on the meta device (strategy.meta_init): storage for this rank's shards only
            materialize(net, strategy.root_device if strategy is not None else "cpu")
            self.on_net_materialized()

    def on_net_materialized(self) -> None:
        """Called once the net built on the meta device holds its initial values: load starting weights here."""

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
        scheduler = call_partial("scheduler", sched_cfg, optimizer)
        out: dict[str, Any] = {"scheduler": scheduler, "interval": interval, "frequency": frequency}
        if monitor and self.automatic_optimization:  # manual optimization steps its schedulers itself
            out["monitor"] = monitor
        return out

    def _schedule_length(self, interval: str) -> int:
        trainer = self.trainer
        if interval == "step":
            return max(1, optimizer_steps_in_run(trainer))
        if trainer.max_epochs is None or trainer.max_epochs < 0:
            raise ConfigError("an epoch-based LR schedule needs trainer.max_epochs (or set the schedule length)")
        return max(1, trainer.max_epochs)

    # ---- training: one optimizer step per batch, from the task's per-step loss ----------------------------------
    @steps_through_step_loss
    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        """One optimizer step on `batch`, from the task's `step_loss(batch)`: the loss of one step (updating the
        training metrics). `step_loss` is what loop helpers (litforge.loops.steps_per_call) drive; a task
        that cannot be stepped that way (DQN acts in its environment) overrides `training_step` instead."""
        where = self.step_position(batch_idx)
        # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
        loss = self.step_loss(batch)  # type: ignore[operator]
        self.log_training_loss(loss, batch, where)
        return loss

    def step_position(self, batch_idx: int) -> Where:
        """(global step, epoch, batch) before this training step's first optimizer step: what a NaN report names."""
        trainer = attached_trainer(self)
        return (trainer.global_step, trainer.current_epoch, batch_idx) if trainer is not None else (0, 0, batch_idx)

    def log_training_loss(self, loss: torch.Tensor, batch: Sequence[torch.Tensor], where: Where) -> None:
        """Keep the loss on the device; on the steps the loggers write, read every kept loss to the host in one copy
        and log `train/loss` (the mean, when a training step ran several optimizer steps) from it.

        Why only then: each `self.log` costs ~600 Python calls, more than a small net's whole step
        (benchmarks/step_overhead.py), and each read of a device value is a host sync on a GPU
        (litforge.runtime.host_reads).
        """
        self.step_losses.keep(loss, where)
        if self.logs_this_step():
            values = self.step_losses.read()
            self.log(
                "train/loss",
                host_scalar(sum(values) / len(values)),
                on_step=True,
                on_epoch=False,
                prog_bar=True,
                batch_size=len(batch[0]),
            )

    # ---- logging ---------------------------------------------------------------------------------------------------
    def logs_this_step(self) -> bool:
        """Whether Lightning writes step metrics to the loggers after this training step.

        True every `trainer.log_every_n_steps` steps (and in `fast_dev_run`): step metrics logged on other steps
        are never written anywhere, yet each `self.log` call costs hundreds of Python calls. Outside a trainer it
        answers True (log every step: correct, only slower).
        """
        trainer = attached_trainer(self)
        if trainer is None or getattr(trainer, "fast_dev_run", False):  # set outside Trainer.__init__'s annotations
            return True
        return writes_step_metrics(trainer, self.step_at_batch_start)

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        """The global step as this batch begins: the logging decision of the whole batch is taken from it (a task
        overriding this hook calls super())."""
        self.step_at_batch_start = self.global_step

    # ---- checkpoints ----------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        cls = type(self)
        checkpoint[CHECKPOINT_KEY] = {
            "task_class": f"{cls.__module__}.{cls.__qualname__}",
            "run_config": self.run_config,
            # global RNG state: dropout and augmentation draw from it, so an exact resume needs it back
            "rng": {"ranks": _gather_per_rank(_rng_state(self.device))},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng = checkpoint.get(CHECKPOINT_KEY, {}).get("rng")
        if rng and attached_trainer(self) is not None and self.trainer.state.fn == "fit":
            if "ranks" not in rng:  # written before per-rank states (one CPU state, rank 0's CUDA generators)
                torch.set_rng_state(rng["torch"])
                return
            rank = _rank()
            if rank < len(rng["ranks"]):  # a rank the saving run did not have keeps its seeded state
                _set_rng_state(rng["ranks"][rank], self.device)


# ---- RNG state per rank --------------------------------------------------------------------------------------------
# Each rank draws its own dropout masks and augmentations (its CPU generator, and the generator of its own GPU). Only
# rank 0 writes the checkpoint file, so its states alone used to be saved, and every rank restored rank 0's: ranks
# resumed with each other's (or identical) noise. Now every rank's pair is gathered into the file and each rank takes
# back its own. Lightning's Trainer saves no RNG state at all (only Fabric's seed helpers collect one process's).
def _rng_state(device: torch.device) -> dict[str, Any]:
    """This process's CPU generator and, on a GPU, the generator of its own device (not every visible device's)."""
    return {
        "torch": torch.get_rng_state(),
        "device": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("device") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["device"], device)


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _gather_per_rank(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's `state`, by rank (a collective: Lightning calls `on_save_checkpoint` on every rank)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [state]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states
