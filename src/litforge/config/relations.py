"""The checks that read several keys at once (one table, :data:`RELATIONS`), and keys that moved to another group.

A relation runs once per run on the composed config, after each key's own check (litforge.config.check), when all of
its keys are in the config (values may be null); its message is one line naming the keys, their values (`{0}`, `{1}`,
... as typed on the command line) and the fix, or a function of the values that writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from litforge.core.bounds import fold_refusal

# keys that moved to another group: the old spelling is refused with the new one, never silently ignored
MOVED_KEYS = {"model.init_from": "task.init_from", "optimizer.lr_scaling": "task.lr_scaling"}


def moved_key_message(old: str, value: object = "<value>") -> str:
    return f"{old} has moved to {MOVED_KEYS[old]}: pass {MOVED_KEYS[old]}={value} instead"


def _ends(target: object, *names: str) -> bool:
    return str(target).endswith(names)


def _ints(*values: object) -> bool:
    """All positive integers (a relation on counts leaves other values to the single-key checks)."""
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


# what litforge's tasks predict and what known losses compare (torch-free: checked before anything is imported)
PREDICTS = {
    f"litforge.tasks.{m}": "class" for m in ("classification.ClassificationTask", "language_model.LanguageModelTask")
}
PREDICTS |= {f"litforge.tasks.{m}": "value" for m in ("regression.RegressionTask", "dqn.DQNTask")}
PREDICTS["litforge.tasks.multilabel.MultiLabelTask"] = "labels"  # a yes/no per label
LOSS_COMPARES = {f"torch.nn.{m}": "class" for m in ("CrossEntropyLoss", "NLLLoss")} | {
    "litforge.tasks.losses.FocalLoss": "class"
}
LOSS_COMPARES |= {f"torch.nn.{m}": "value" for m in ("MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss")}
LOSS_COMPARES["torch.nn.BCEWithLogitsLoss"] = "labels"

# (keys, holds(*values), message: a format of the values as typed, or a function of them that writes the line)
Relation = tuple[tuple[str, ...], Callable[..., bool], str | Callable[..., str | None]]
RELATIONS: tuple[Relation, ...] = (
    (("data.fold", "data.num_folds"), lambda *values: fold_refusal(*values) is None, fold_refusal),
    (
        ("trainer.min_epochs", "trainer.max_epochs"),
        lambda lo, hi: lo is None or hi is None or hi < 0 or lo <= hi,
        "trainer.min_epochs={0} is more than trainer.max_epochs={1}: the run would stop at max_epochs anyway; "
        "pass trainer.min_epochs={1} or less",
    ),
    (
        ("trainer.enable_checkpointing", "callbacks.model_checkpoint._target_"),
        lambda enabled, target: enabled is not False or not _ends(target, "ModelCheckpoint"),
        "trainer.enable_checkpointing={0}, but callbacks.model_checkpoint is configured: also pass "
        "callbacks.model_checkpoint=null (or drop trainer.enable_checkpointing=false)",
    ),
    (
        ("optimizer.nesterov", "optimizer.momentum"),
        lambda nesterov, momentum: not nesterov or (momentum or 0) > 0,
        "optimizer.nesterov={0} needs momentum, but optimizer.momentum={1}: pass optimizer.momentum=0.9 "
        "or optimizer.nesterov=false",
    ),
    (
        ("callbacks.pruning.start_epoch", "callbacks.pruning.end_epoch"),
        lambda start, end: end is None or end >= start,
        "callbacks.pruning.end_epoch={1} is before callbacks.pruning.start_epoch={0}: pass "
        "callbacks.pruning.end_epoch={0} or later (null = prune once, at start_epoch)",
    ),
    # ModelParallelStrategy (strategy=fsdp/tp/fsdp_tp) never converts BatchNorm: the flag would be silently ignored
    (
        ("trainer.sync_batchnorm", "strategy._target_"),
        lambda sync, target: not sync or not _ends(target, "ModelParallel"),
        "trainer.sync_batchnorm={0} is ignored under strategy._target_={1} (fsdp/tp never convert BatchNorm): "
        "use strategy=ddp with trainer.sync_batchnorm=true, or trainer.sync_batchnorm=false",
    ),
    (
        ("tune.finder", "tune.mode"),
        lambda finder, mode: (
            mode in {"lr_find": ("exponential", "linear"), "batch_size": ("power", "binsearch")}.get(finder, (mode,))
        ),
        "tune.mode={1} is not a mode of tune={0}: tune=lr_find takes exponential or linear, tune=batch_size "
        "power or binsearch",
    ),
    (
        ("tune.min_lr", "tune.max_lr"),
        lambda lo, hi: lo < hi,
        "tune.min_lr={0} is not below tune.max_lr={1}: the finder tries lrs from min_lr up to max_lr, e.g. "
        "tune.min_lr=1e-6 tune.max_lr=1",
    ),
    # a schedule whose length is filled from the run's (null T_max/total_steps) needs a run with an end
    (
        ("scheduler.interval", "scheduler.scheduler", "trainer.max_epochs", "trainer.max_steps"),
        lambda interval, sched, epochs, steps: (
            epochs != -1
            or not isinstance(sched, Mapping)
            or all(sched.get(k, 0) is not None for k in ("T_max", "total_steps"))
            or interval == "step"
            and steps not in (None, -1)
        ),
        "trainer.max_epochs={2} with trainer.max_steps={3} never ends, so the schedule spanning the run "
        "(scheduler.interval={0}) has no length: pass trainer.max_steps=10000 (interval=step) or "
        "trainer.max_epochs=30, or give the schedule its own length (scheduler.scheduler.total_steps/T_max)",
    ),
    (
        ("strategy._target_", "strategy.microbatches", "data.batch_size"),
        lambda target, micro, batch: not _ends(target, "Pipeline") or not _ints(micro, batch) or batch % micro == 0,
        "data.batch_size={2} is not divisible by strategy.microbatches={1}: use a multiple, e.g. data.batch_size={1}0",
    ),
    (
        ("strategy._target_", "strategy.data_parallel", "trainer.devices", "trainer.num_nodes"),
        lambda target, dp, devices, nodes: (
            not _ends(target, "Pipeline") or not _ints(dp, devices, nodes) or devices * nodes % dp == 0
        ),
        "trainer.devices={2} (x trainer.num_nodes={3}) gives processes not divisible by strategy.data_parallel="
        "{1}: use stages x data_parallel processes, e.g. trainer.devices={1}",
    ),
    (
        ("strategy.replicate_size", "strategy.tensor_parallel_size"),
        lambda replicas, tp: not isinstance(replicas, int) or replicas <= 1 or tp in (1, "1"),
        "strategy.replicate_size={0} (HSDP) with strategy.tensor_parallel_size={1} would need a 3-D mesh, which "
        "litforge does not build: use strategy=hsdp (tensor_parallel_size=1) or strategy=fsdp_tp",
    ),
    # Hogwild shares host memory between CPU processes (litforge.parallel.hogwild)
    (
        ("trainer.accelerator", "strategy._target_"),
        lambda accelerator, target: not _ends(target, "Hogwild") or str(accelerator) not in ("gpu", "cuda"),
        "trainer.accelerator={0} with strategy=hogwild: hogwild runs CPU worker processes sharing host memory "
        "only; use trainer=cpu, or strategy=ddp on GPUs",
    ),
    # a task's loss compares what it predicts (class scores or values); a known loss of the other family would
    # train silently on nonsense (cross-entropy on regression targets) or fail deep in a step
    (
        ("task._target_", "loss._target_"),
        lambda task, loss: PREDICTS.get(task, "?") in (LOSS_COMPARES.get(loss, "?"), "?") or loss not in LOSS_COMPARES,
        "loss._target_={1} does not fit task._target_={0} (a loss for class scores on a task that predicts "
        "values, or the reverse): pick a loss of the task (task=regression: loss=mse, huber or l1; "
        "task=classification: loss=cross_entropy, focal or label_smoothing; task=multilabel: loss=bce), or drop the "
        "loss= override",
    ),
    # data=csv's target read as classes or numbers against what the task predicts (`auto`: litforge.data.tables)
    (
        ("data.target_kind", "task._target_"),
        lambda kind, task: PREDICTS.get(task, kind) == kind or kind == "auto",
        "data.target_kind={0} does not fit task._target_={1}; pass task=classification for data.target_kind=class, "
        "task=regression for data.target_kind=value",
    ),
    # FSDP2's fully_shard refuses non-contiguous parameters, and channels_last weights are not contiguous
    (
        ("channels_last", "strategy._target_"),
        lambda nhwc, target: not nhwc or not _ends(target, "ModelParallel"),
        "channels_last={0} fails under strategy._target_={1} (FSDP2 shards only contiguous parameters): pass "
        "channels_last=false, or strategy=ddp with channels_last=true",
    ),
)
