"""The one config check: the composed config bound to the typed signatures of what it builds, plus the relations.

Every value a user can set is typed and bounded where it is used: a litforge class in its annotated constructor
(litforge.core.bounds), a library class by its stand-in (litforge.config.library), the jobs' own keys in
litforge.jobs.settings (handed in by the jobs). :func:`check_config` binds a whole composed config to those in two
passes: the torch-free stand-ins and job settings first (a typo costs a fraction of a second), then every `_target_`
imported and bound (litforge.config.signatures), so a user's own datamodule, model or task is checked with no table
to edit. Left here: :data:`RELATIONS`, the checks that read two keys at once, and keys that moved.

Where it runs: the command line (litforge.cli.preflight) on the composed config before Hydra starts a job; every
config, also one composed in code, where a group is built (:func:`check_group`, from litforge.config.instantiate and
litforge.jobs.build) and for the job's own keys (:func:`check_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from litforge.config.signatures import check_target, parameters, shown
from litforge.core.errors import ConfigError

# keys that moved to another group: the old spelling is refused with the new one, never silently ignored
MOVED_KEYS = {"model.init_from": "task.init_from", "optimizer.lr_scaling": "task.lr_scaling"}
BUILT_GROUPS = ("data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer", "strategy")
NAMED_GROUPS = ("callbacks", "logger")  # {name: {_target_: ...}}: each entry is built (and checked) on its own
_MISSING = object()


@dataclass(frozen=True)
class Relation:
    """A check on several keys together; runs when all of `keys` are in the config (values may be null)."""

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    message: str  # format string: {0}, {1}, ... are the values of `keys`, written as on the command line


def _ends(target: Any, *names: str) -> bool:
    return str(target).endswith(names)


def _ints(*values: Any) -> bool:
    """All positive integers (a relation on counts leaves other values to the single-key checks)."""
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


# what litforge's tasks predict and what known losses compare (torch-free: checked before anything is imported)
PREDICTS = {
    "litforge.tasks.classification.ClassificationTask": "class",
    "litforge.tasks.language_model.LanguageModelTask": "class",
    "litforge.tasks.regression.RegressionTask": "value",
    "litforge.tasks.dqn.DQNTask": "value",
}
LOSS_COMPARES = {
    "torch.nn.CrossEntropyLoss": "class",
    "torch.nn.NLLLoss": "class",
    "litforge.tasks.losses.FocalLoss": "class",
    "torch.nn.MSELoss": "value",
    "torch.nn.L1Loss": "value",
    "torch.nn.HuberLoss": "value",
    "torch.nn.SmoothL1Loss": "value",
}

RELATIONS: tuple[Relation, ...] = (
    Relation(
        ("data.fold", "data.num_folds"),
        lambda fold, folds: folds is None or fold < folds,
        "data.fold={0} is outside [0, {1}) for data.num_folds={1}: pass data.fold=0 (all folds: "
        "-m data.fold='range({1})')",
    ),
    Relation(
        ("trainer.min_epochs", "trainer.max_epochs"),
        lambda lo, hi: lo is None or hi is None or hi < 0 or lo <= hi,
        "trainer.min_epochs={0} is more than trainer.max_epochs={1}: the run would stop at max_epochs anyway; "
        "pass trainer.min_epochs={1} or less",
    ),
    Relation(
        ("trainer.enable_checkpointing", "callbacks.model_checkpoint._target_"),
        lambda enabled, target: enabled is not False or not _ends(target, "ModelCheckpoint"),
        "trainer.enable_checkpointing={0}, but callbacks.model_checkpoint is configured: also pass "
        "callbacks.model_checkpoint=null (or drop trainer.enable_checkpointing=false)",
    ),
    Relation(
        ("optimizer.nesterov", "optimizer.momentum"),
        lambda nesterov, momentum: not nesterov or (momentum or 0) > 0,
        "optimizer.nesterov={0} needs momentum, but optimizer.momentum={1}: pass optimizer.momentum=0.9 "
        "or optimizer.nesterov=false",
    ),
    Relation(
        ("callbacks.pruning.start_epoch", "callbacks.pruning.end_epoch"),
        lambda start, end: end is None or end >= start,
        "callbacks.pruning.end_epoch={1} is before callbacks.pruning.start_epoch={0}: pass "
        "callbacks.pruning.end_epoch={0} or later (null = prune once, at start_epoch)",
    ),
    # ModelParallelStrategy (strategy=fsdp/tp/fsdp_tp) never converts BatchNorm: the flag would be silently ignored
    Relation(
        ("trainer.sync_batchnorm", "strategy._target_"),
        lambda sync, target: not sync or not _ends(target, "ModelParallel"),
        "trainer.sync_batchnorm={0} is ignored under strategy._target_={1} (fsdp/tp never convert BatchNorm): "
        "use strategy=ddp with trainer.sync_batchnorm=true, or trainer.sync_batchnorm=false",
    ),
    Relation(
        ("tune.finder", "tune.mode"),
        lambda finder, mode: (
            mode in {"lr_find": ("exponential", "linear"), "batch_size": ("power", "binsearch")}.get(finder, (mode,))
        ),
        "tune.mode={1} is not a mode of tune={0}: tune=lr_find takes exponential or linear, tune=batch_size "
        "power or binsearch",
    ),
    Relation(
        ("tune.min_lr", "tune.max_lr"),
        lambda lo, hi: lo < hi,
        "tune.min_lr={0} is not below tune.max_lr={1}: the finder tries lrs from min_lr up to max_lr, e.g. "
        "tune.min_lr=1e-6 tune.max_lr=1",
    ),
    # a schedule whose length is filled from the run's (null T_max/total_steps) needs a run with an end
    Relation(
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
    Relation(
        ("strategy._target_", "strategy.microbatches", "data.batch_size"),
        lambda target, micro, batch: not _ends(target, "Pipeline") or not _ints(micro, batch) or batch % micro == 0,
        "data.batch_size={2} is not divisible by strategy.microbatches={1}: use a multiple, e.g. data.batch_size={1}0",
    ),
    Relation(
        ("strategy._target_", "strategy.data_parallel", "trainer.devices", "trainer.num_nodes"),
        lambda target, dp, devices, nodes: (
            not _ends(target, "Pipeline") or not _ints(dp, devices, nodes) or devices * nodes % dp == 0
        ),
        "trainer.devices={2} (x trainer.num_nodes={3}) gives processes not divisible by strategy.data_parallel="
        "{1}: use stages x data_parallel processes, e.g. trainer.devices={1}",
    ),
    Relation(
        ("strategy.replicate_size", "strategy.tensor_parallel_size"),
        lambda replicas, tp: not isinstance(replicas, int) or replicas <= 1 or tp in (1, "1"),
        "strategy.replicate_size={0} (HSDP) with strategy.tensor_parallel_size={1} would need a 3-D mesh, which "
        "litforge does not build: use strategy=hsdp (tensor_parallel_size=1) or strategy=fsdp_tp",
    ),
    # Hogwild shares host memory between CPU processes (litforge.parallel.hogwild)
    Relation(
        ("trainer.accelerator", "strategy._target_"),
        lambda accelerator, target: not _ends(target, "Hogwild") or str(accelerator) not in ("gpu", "cuda"),
        "trainer.accelerator={0} with strategy=hogwild: hogwild runs CPU worker processes sharing host memory "
        "only; use trainer=cpu, or strategy=ddp on GPUs",
    ),
    # a task's loss compares what it predicts (class scores or values); a known loss of the other family would
    # train silently on nonsense (cross-entropy on regression targets) or fail deep in a step
    Relation(
        ("task._target_", "loss._target_"),
        lambda task, loss: PREDICTS.get(task, "?") in (LOSS_COMPARES.get(loss, "?"), "?") or loss not in LOSS_COMPARES,
        "loss._target_={1} does not fit task._target_={0} (a loss for class scores on a task that predicts "
        "values, or the reverse): pick a loss of the task (task=regression: loss=mse, huber or l1; "
        "task=classification: loss=cross_entropy, focal or label_smoothing), or drop the loss= override",
    ),
    # FSDP2's fully_shard refuses non-contiguous parameters, and channels_last weights are not contiguous
    Relation(
        ("channels_last", "strategy._target_"),
        lambda nhwc, target: not nhwc or not _ends(target, "ModelParallel"),
        "channels_last={0} fails under strategy._target_={1} (FSDP2 shards only contiguous parameters): pass "
        "channels_last=false, or strategy=ddp with channels_last=true",
    ),
)


def check_group(scope: str, node: Any, imports: bool = True) -> None:
    """Check one group as it is built: `scope` is `data`, `trainer`, ... or `callbacks.<name>` for one entry."""
    if node is None:
        return
    check_package(scope, node)
    for key, sub in _targets(scope, node):
        own = key == scope and "_target_" not in sub and "." not in scope  # a group built without a `_target_`
        check_target(key, sub, imports, target_name=scope if own else None)
    for relation in RELATIONS:
        if {_scope(k) for k in relation.keys} == {scope}:
            _check_relation(relation, lambda key: _lookup(node, key[len(scope) + 1 :]))


def check_run(cfg: Any, settings: type | None = None) -> None:
    """Check what a job reads itself (the top-level keys, bound to its structured `settings`, e.g.
    litforge.jobs.settings.JobSettings) and the relations across groups."""
    if cfg is None:
        return
    if settings is not None:
        own = OmegaConf.masked_copy(cfg, [str(k) for k in cfg.keys() if k not in BUILT_GROUPS and k != "hydra"])
        check_target("", own, target_name=settings.__name__, signature=parameters(settings))
    for relation in RELATIONS:  # those of no one group (a group's own are checked where it is built)
        if len(scopes := {_scope(k) for k in relation.keys}) > 1 or scopes == {None}:
            _check_relation(relation, lambda key: _lookup(cfg, key))


def check_config(cfg: Any, settings: type | None = None) -> None:
    """Everything, in the order the job builds it: what preflight runs on the composed command-line config. The
    torch-free checks of every group come first, then the signatures (which import the targets, torch with them)."""
    check_moved_keys(cfg)
    check_run(cfg, settings)
    for imports in (False, True):
        for group in BUILT_GROUPS:
            node = cfg.get(group)
            for scope, sub in (
                [(f"{group}.{n}", node[n]) for n in node] if group in NAMED_GROUPS and node else [(group, node)]
            ):
                check_group(scope, sub, imports)


def check_package(scope: str, node: Any) -> None:
    """Refuse a group whose `_target_` needs an extra that is not installed (litforge.runtime.extras); a tracking
    server that does not answer (MLflow would retry for minutes, then fail inside fit)."""
    import socket
    from urllib.parse import urlsplit

    from litforge.runtime.extras import require

    target = _lookup(node, "_target_")
    require(str(target), f"{scope} ({target})")
    uri = _lookup(node, "tracking_uri")
    if isinstance(uri, str) and uri.startswith(("http://", "https://")):
        url = urlsplit(uri)
        try:
            socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), 3).close()
        except OSError as exc:
            raise ConfigError(
                f"{scope}.tracking_uri={uri}: no server answers there ({exc.strerror or exc}): start it "
                f"(mlflow server --port {url.port or 5000}), or pass {scope}.tracking_uri=null for the local store"
            ) from None


def moved_key_message(old: str, value: Any = "<value>") -> str:
    return f"{old} has moved to {MOVED_KEYS[old]}: pass {MOVED_KEYS[old]}={value} instead"


def check_moved_keys(cfg: Any) -> None:
    """Refuse a composed config (e.g. from a user's own YAML) that still sets a key under its old name."""
    for old in MOVED_KEYS:
        value = OmegaConf.select(cfg, old, throw_on_missing=False) if OmegaConf.is_config(cfg) else None
        if value is not None:
            raise ConfigError(moved_key_message(old, value))


def _targets(prefix: str, node: Any) -> list[tuple[str, Any]]:
    """(key, node) of the group itself and of every mapping with a `_target_` under it."""
    found = [(prefix, node)] if OmegaConf.is_dict(node) or isinstance(node, Mapping) else []
    for key in list(node.keys()) if found else []:
        try:
            sub = node[key]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            continue
        found += [t for t in _targets(f"{prefix}.{key}", sub) if "_target_" in t[1]]
    return found


def _scope(key: str) -> str | None:
    """The builder scope a full key belongs to: `data`, `callbacks.<name>`; None for what the job reads itself."""
    parts = key.split(".")
    return ".".join(parts[:2]) if parts[0] in NAMED_GROUPS else parts[0] if parts[0] in BUILT_GROUPS else None


def _check_relation(relation: Relation, lookup: Callable[[str], Any]) -> None:
    values = [lookup(key) for key in relation.keys]
    if all(v is not _MISSING for v in values) and not relation.holds(*values):
        raise ConfigError(relation.message.format(*(shown(v, quote=False) for v in values)))


def _lookup(node: Any, key: str) -> Any:
    """The value at dotted `key` under `node` (resolved), or _MISSING when a part is absent or cannot resolve."""
    for part in key.split("."):
        if not (isinstance(node, Mapping) or OmegaConf.is_dict(node)) or part not in node.keys():
            return _MISSING
        try:
            node = node[part]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            return _MISSING
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
