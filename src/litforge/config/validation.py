"""The config rules: every value a user can set is checked (type and range) before anything is built from it.

One declarative table, :data:`RULES`: a full key pattern (`data.batch_size`, `data.*_fraction`,
`scheduler.scheduler.step_size`, `seed`) → what it takes and a valid example. A rule keyed by a key name applies to
every option of the group that has that key (`model.dropout` covers mlp, cnn, vit and gpt). :data:`RELATIONS` adds
the few checks that read two keys at once (`trainer.min_epochs` vs `trainer.max_epochs`). Every failure is one
ConfigError line naming the key, the value and a valid example.

Where the checks run, once for each way a config reaches litforge:
- the command line: :func:`check_config` on the whole composed config, in litforge.cli.preflight before Hydra starts a
  job (a typo costs a fraction of a second);
- every config, also one composed in code (notebooks, tests): :func:`check_group` where a group is built
  (litforge.config.instantiate.instantiate_group, litforge.jobs.build.build_task / build_strategy), and
  :func:`check_run` for the keys a job reads itself (top level, `paths`) and the relations across groups.

Torch-free, like everything the CLI runs before a job. Checks that need built objects (an image size against the
patch size, a GPU for sync_batchnorm) stay where those objects are made.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from litforge.config.durations import is_time_limit, parse_every
from litforge.config.signatures import check_target, shown
from litforge.core.errors import ConfigError

# keys that moved to another group: the old spelling is refused with the new one, never silently ignored
MOVED_KEYS = {
    "model.init_from": "task.init_from",  # which weights a task starts from is the task's business, not the net's
    "optimizer.lr_scaling": "task.lr_scaling",  # scaling by the data-parallel replicas is decided by the task
}

# groups a builder turns into objects (checked there, by check_group); everything else is read by the job itself
BUILT_GROUPS = ("data", "model", "task", "optimizer", "scheduler", "loss", "callbacks", "logger", "trainer", "strategy")
NAMED_GROUPS = ("callbacks", "logger")  # {name: {_target_: ...}}: each entry is built (and checked) on its own
NOT_CHECKED = ("hydra",)  # Hydra's own settings: Hydra checks them

# `_target_`s that need an optional package: (module to import, what to install); checked before anything is built,
# so a missing tracker is one line, not Lightning's ModuleNotFoundError after the data and the net were built
NEEDS_PACKAGE = {
    "litforge.records.tracking.WandbLogger": ("wandb", "wandb==0.31.0"),
    "pytorch_lightning.loggers.WandbLogger": ("wandb", "wandb==0.31.0"),
    "litforge.records.tracking.MLflowLogger": ("mlflow", "'mlflow>=3.17,<3.18'"),
}


# ---- rules -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """What one key takes: `accepts(value)` says whether a (non-null) value fits; `expect` says it in words."""

    expect: str  # e.g. "an integer >= 1"
    accepts: Callable[[Any], bool]
    example: str  # a valid value as typed on the command line, e.g. "64"
    null: bool = False  # null is valid (its meaning is in the key's comment in conf/)
    reasons: tuple[tuple[Any, str], ...] = ()  # (value, why it is refused): "trains nothing"

    def problem(self, key: str, value: Any) -> str | None:
        """The error message for `key=value`, or None when the value fits."""
        if value is None and self.null or value is not None and self.accepts(value):
            return None
        why = next((f" {reason}" for bad, reason in self.reasons if _same(value, bad)), "")
        expect = self.expect + (" or null" if self.null else "")
        return f"{key}={shown(value)}{why}: expected {expect}, e.g. {key}={self.example}"


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_zero(v: Any) -> bool:
    return _is_number(v) and v == 0


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return ""


def integer(
    lo: int | None = None,
    hi: int | None = None,
    *,
    also: tuple[int, ...] = (),
    example: Any,
    null: bool = False,
    reasons: tuple[tuple[Any, str], ...] = (),
    extra: str = "",
) -> Rule:
    """A whole number in [lo, hi], or one of `also` (e.g. -1 for "no limit")."""

    def accepts(v: Any) -> bool:
        return _is_int(v) and ((lo is None or v >= lo) and (hi is None or v <= hi) or v in also)

    words = " ".join(filter(None, ["an integer", _interval(lo, hi, False, False)]))
    words += "".join(f" or {a}" for a in also) + extra
    return Rule(words, accepts, str(example), null, reasons)


def number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    example: Any,
    null: bool = False,
    reasons: tuple[tuple[Any, str], ...] = (),
) -> Rule:
    """A real number with the given bounds (`gt`/`lt` exclusive, `ge`/`le` inclusive); integers count."""

    def accepts(v: Any) -> bool:
        return (
            _is_number(v)
            and (gt is None or v > gt)
            and (ge is None or v >= ge)
            and (lt is None or v < lt)
            and (le is None or v <= le)
        )

    lo, hi = (gt if gt is not None else ge), (lt if lt is not None else le)
    words = " ".join(filter(None, ["a number", _interval(lo, hi, gt is not None, lt is not None)]))
    return Rule(words, accepts, str(example), null, reasons)


def fraction_or_count(
    *, zero: bool, example: Any, null: bool = True, reasons: tuple[tuple[Any, str], ...] = ()
) -> Rule:
    """Lightning's `limit_*_batches` style: a float fraction of the batches, or an int count of them."""

    def accepts(v: Any) -> bool:
        if isinstance(v, float):
            return (0.0 <= v if zero else 0.0 < v) and v <= 1.0
        return _is_int(v) and v >= (0 if zero else 1)

    words = f"a fraction in {'[' if zero else '('}0, 1] or a batch count >= {0 if zero else 1}"
    return Rule(words, accepts, str(example), null, reasons)


def boolean(*, null: bool = False, example: str = "true") -> Rule:
    return Rule("true or false", lambda v: isinstance(v, bool), example, null)


def choice(*options: Any, example: Any = None, null: bool = False) -> Rule:
    def accepts(v: Any) -> bool:
        return any(_same(v, o) for o in options)

    return Rule(
        "one of " + ", ".join(shown(o, quote=False) for o in options),
        accepts,
        shown(options[0] if example is None else example, quote=False),
        null,
    )


def text(*, example: str, null: bool = False, empty: bool = False) -> Rule:
    return Rule(
        "a string" if empty else "a non-empty string",
        lambda v: isinstance(v, str) and (empty or v != ""),
        example,
        null,
    )


def int_list(
    lo: int = 1,
    hi: int | None = None,
    *,
    nonempty: bool = False,
    distinct: bool = False,
    example: str,
    null: bool = False,
) -> Rule:
    def accepts(v: Any) -> bool:
        return (
            isinstance(v, list)
            and (bool(v) or not nonempty)
            and all(_is_int(x) and x >= lo and (hi is None or x <= hi) for x in v)
            and (not distinct or len(set(v)) == len(v))
        )

    words = f"a {'non-empty ' if nonempty else ''}list of {'distinct ' if distinct else ''}integers " + _interval(
        lo, hi, False, False
    )
    return Rule(words, accepts, example, null)


def number_list(*, length: int, ge: float, lt: float, example: str) -> Rule:
    def accepts(v: Any) -> bool:
        return isinstance(v, list) and len(v) == length and all(_is_number(x) and ge <= x < lt for x in v)

    return Rule(f"a list of {length} numbers in [{ge}, {lt})", accepts, example)


def either(expect: str, *rules: Rule, example: str, null: bool = False) -> Rule:
    """A value that fits any one of `rules` (e.g. a count, `auto`, or a list of device ids)."""
    return Rule(expect, lambda v: any(r.accepts(v) for r in rules), example, null)


def mapping_or(rule: Rule, expect: str) -> Rule:
    """`rule`, or a mapping (whose own keys are checked one by one)."""
    return Rule(expect, lambda v: isinstance(v, Mapping) or rule.accepts(v), rule.example, rule.null)


SEED = integer(0, 2**32 - 1, example=42)  # numpy's seed range, which Lightning's seed_everything enforces
TRAINS_NOTHING = ((0, "trains nothing"), (0.0, "trains nothing"))
# Lightning's precision names (lightning_fabric.connector._PRECISION_INPUT; tests/test_validation.py compares)
PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "16-mixed",
    "bf16-true",
    "16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    64,
    32,
    16,
    "64",
    "32",
    "16",
    "bf16",
)

RULES: dict[str, Rule] = {
    # ---- top level (every job) ----
    "seed": SEED,
    "task_name": text(example="my_experiment"),
    "print_config": boolean(example="false"),
    "ckpt_path": text(example="path/to/last.ckpt", null=True),
    # train
    "resume": text(example="auto", null=True),
    "test_after_training": boolean(example="false"),
    "compile": mapping_or(boolean(example="true"), "true, false or a mapping of torch.compile options"),
    "channels_last": boolean(example="true"),
    "activation_checkpointing": choice("none", "full", "selective", example="full"),
    "matmul_precision": choice("highest", "high", "medium", example="highest"),
    "steps_per_call": either("an integer >= 1 or auto", integer(1, example=4), choice("auto"), example="auto"),
    "checkpoint_every": Rule(
        "a step count >= 1 or a duration (30min, 2h, 90s)", lambda v: parse_every(v) is not None, "500", null=True
    ),
    "checkpoint_async": boolean(example="true"),
    "time_limit": Rule("auto or a duration (3h55min, 30min, 04:00:00)", is_time_limit, "3h55min", null=True),
    "objective.metric": text(example="val/loss"),
    "objective.mode": choice("min", "max"),
    # predict
    "input": text(example="path/to/images", null=True),
    "output": text(example="predictions.csv", null=True),
    "batch_size": integer(1, example=256),
    "device": Rule(
        "auto, cpu, cuda or cuda:<index>",
        lambda v: isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", v) is not None,
        "auto",
    ),  # predict and generate
    # generate
    "prompt": text(example="def ", empty=True),
    "max_new_tokens": integer(1, example=500),
    "temperature": number(gt=0, example=0.8),
    "top_k": integer(1, example=10, null=True),
    "num_samples": integer(1, example=3),
    # export
    "opset": integer(7, example=20, null=True),
    "input_dtype": choice("uint8", "float32"),
    "calibration.size": integer(1, example=512),
    "calibration.batch_size": integer(1, example=64),
    "parity.atol": number(ge=0, example="1e-4"),
    "parity.min_agreement": number(ge=0, le=1, example=0.999),
    "report.batch_sizes": int_list(1, nonempty=True, example="[1,64]"),
    "report.rounds": integer(1, example=15),
    "report.max_acc_drop": number(ge=0, example=0.01),
    # prepare (python prepare.py: LitData shards)
    "overwrite": boolean(example="true"),
    "num_workers": integer(1, example=4),
    "start_method": choice("fork", "spawn", "forkserver", example="spawn", null=True),
    "chunk_bytes": either(
        "a size like 64MB or a byte count", integer(1, example=67108864), text(example="64MB"), example="64MB"
    ),
    # paths
    "paths.data_dir": text(example="data"),
    "paths.log_dir": text(example="logs"),
    "paths.min_free_mb": number(ge=0, example=200),
    # tune (Lightning's finders before training: litforge.jobs.tuning)
    "tune.finder": choice("none", "lr_find", "batch_size", example="lr_find"),
    "tune.apply": boolean(example="false"),
    "tune.min_lr": number(gt=0, example="1e-6"),
    "tune.max_lr": number(gt=0, example=1.0),
    "tune.num_training": integer(13, example=100, extra=" (the suggestion skips the first 10 steps and the last)"),
    "tune.mode": choice("exponential", "linear", "power", "binsearch", example="exponential"),
    "tune.early_stop_threshold": number(gt=1, example=4.0, null=True),
    "tune.init_val": integer(1, example=2),
    "tune.max_trials": integer(1, example=25),
    "tune.steps_per_trial": integer(1, example=3),
    "tune.max_val": integer(1, example=8192),
    # ---- data ----
    "data.batch_size": integer(1, example=64),
    "data.num_workers": integer(0, example=4),
    "data.*_fraction": number(ge=0, lt=1, example=0.1),
    "data.*_seed": SEED,
    "data.seed": SEED,
    "data.augment": either(
        "one of none, flip_crop, randaugment, trivialaugment, autoaugment (true/false: the older "
        "spelling of flip_crop/none)",
        choice("none", "flip_crop", "randaugment", "trivialaugment", "autoaugment"),
        boolean(),
        example="flip_crop",
    ),
    "data.num_folds": integer(2, example=5, null=True),
    "data.fold": integer(0, example=0),
    "data.on_device": choice("auto", True, False),
    "data.download": boolean(example="false"),
    "data.data_dir": text(example="data"),
    "data.root": text(example="/path/to/images"),
    "data.input_dir": text(example="data/streaming/digits"),  # data=streaming: what prepare wrote
    "data.cache_dir": text(example="/tmp/litdata_cache", null=True),
    "data.eval_batch_size": integer(1, example=256, null=True),
    "data.image_size": either(
        "an integer >= 1 or [height,width]",
        integer(1, example=64),
        int_list(1, example="[64,64]"),
        example="64",
        null=True,
    ),
    "data.channels": choice(1, 3, example=3, null=True),
    "data.classes": int_list(0, 9, nonempty=True, distinct=True, example="[5,6,7,8,9]", null=True),
    "data.train_per_class": integer(1, example=5, null=True),
    "data.path": text(example="corpus.txt", null=True),
    "data.tokenizer": choice("char", "byte"),
    "data.document_separator": text(example="'</doc>'", null=True),
    "data.block_size": integer(1, example=128),
    "data.packed": boolean(example="false"),
    "data.max_chars": integer(1, example=20000, null=True),
    "data.env_id": text(example="CartPole-v1"),
    "data.buffer_size": integer(1, example=100000),
    "data.steps_per_epoch": integer(1, example=1000),
    "data.val_episodes": integer(1, example=10),
    "data.test_episodes": integer(1, example=100),
    # ---- model: each net's own annotated arguments (litforge.config.signatures) ----
    # ---- task ----
    "task.init_from": text(example="path/to/last.ckpt", null=True),
    "task.lr_scaling": choice("none", "linear", "sqrt", example="linear"),
    "task.mix": choice("none", "mixup", "cutmix", example="mixup"),
    "task.mix_alpha": number(gt=0, example=0.2),
    "task.gamma": number(ge=0, le=1, example=0.99),
    "task.double_dqn": boolean(example="true"),
    "task.target_sync_steps": integer(1, example=250),
    "task.target_tau": number(gt=0, le=1, example=1.0),
    "task.warmup_steps": integer(0, example=1000),
    "task.env_steps_per_step": integer(1, example=2),
    "task.eps_start": number(ge=0, le=1, example=1.0),
    "task.eps_end": number(ge=0, le=1, example=0.05),
    "task.eps_decay_steps": integer(0, example=8000),
    # ---- optimizer ----
    "optimizer.lr": number(gt=0, example=0.001),
    "optimizer.weight_decay": number(ge=0, example=0.01),
    "optimizer.momentum": number(ge=0, lt=1, example=0.9),
    "optimizer.nesterov": boolean(example="false"),
    "optimizer.betas": number_list(length=2, ge=0, lt=1, example="[0.9,0.999]"),
    # ---- scheduler ----
    "scheduler.interval": choice("epoch", "step"),
    "scheduler.monitor": text(example="val/loss"),
    "scheduler.scheduler.T_max": integer(1, example=30, null=True),
    "scheduler.scheduler.eta_min": number(ge=0, example=0.0),
    "scheduler.scheduler.max_lr": number(gt=0, example=0.1, null=True),
    "scheduler.scheduler.total_steps": integer(1, example=1000, null=True),
    "scheduler.scheduler.pct_start": number(gt=0, lt=1, example=0.25),
    "scheduler.scheduler.mode": choice("min", "max"),
    "scheduler.scheduler.factor": number(gt=0, lt=1, example=0.5),
    "scheduler.scheduler.patience": integer(0, example=3),
    "scheduler.scheduler.warmup_steps": integer(0, example=100, null=True),
    "scheduler.scheduler.warmup_fraction": number(ge=0, lt=1, example=0.05),
    "scheduler.scheduler.step_size": integer(1, example=10),
    "scheduler.scheduler.gamma": number(gt=0, example=0.1),
    # ---- loss ----
    "loss.gamma": number(ge=0, example=2.0),
    "loss.alpha": either(
        "a number > 0 or a list of per-class weights >= 0",
        number(gt=0, example=0.25),
        Rule("", lambda v: isinstance(v, list) and bool(v) and all(_is_number(x) and x >= 0 for x in v), ""),
        example="0.25",
        null=True,
    ),
    "loss.delta": number(gt=0, example=1.0),
    "loss.label_smoothing": number(ge=0, lt=1, example=0.1),
    # ---- trainer (keyword arguments of pytorch_lightning.Trainer) ----
    "trainer.accelerator": choice("auto", "cpu", "gpu", "cuda", "mps", "tpu", example="cpu"),
    "trainer.devices": either(
        "a count >= 1, -1 (all), auto, or a list of device ids",
        integer(1, also=(-1,), example=1),
        choice("auto"),
        int_list(0, nonempty=True, example="[0,1]"),
        Rule("", lambda v: isinstance(v, str) and re.fullmatch(r"-?\d+(,\d+)*,?", v) is not None, ""),
        example="1",
    ),
    "trainer.num_nodes": integer(1, example=1),
    "trainer.precision": Rule(
        "a Lightning precision: 32-true, bf16-mixed, 16-mixed, bf16-true, 16-true, 64-true, "
        "transformer-engine (or 32, 16, 64, bf16)",
        lambda v: any(_same(v, p) for p in PRECISIONS),
        "bf16-mixed",
    ),
    "trainer.max_epochs": integer(1, also=(-1,), example=30, reasons=TRAINS_NOTHING, extra=" (no limit)"),
    "trainer.min_epochs": integer(0, example=1, null=True),
    "trainer.max_steps": integer(1, also=(-1,), example=1000, reasons=TRAINS_NOTHING, extra=" (no limit)"),
    "trainer.limit_train_batches": fraction_or_count(zero=False, example=0.25, reasons=TRAINS_NOTHING),
    "trainer.limit_val_batches": fraction_or_count(zero=True, example=0.5),  # 0 = no validation (Lightning's word)
    "trainer.limit_test_batches": fraction_or_count(
        zero=False,
        example=0.5,
        reasons=(
            (0, "tests nothing (test_after_training=false skips the test)"),
            (0.0, "tests nothing (test_after_training=false skips the test)"),
        ),
    ),
    "trainer.val_check_interval": fraction_or_count(zero=False, example=0.5),
    "trainer.check_val_every_n_epoch": integer(1, example=1, null=True),
    "trainer.num_sanity_val_steps": integer(-1, example=2),
    "trainer.log_every_n_steps": integer(1, example=10),
    "trainer.gradient_clip_val": number(ge=0, example=1.0, null=True),
    "trainer.gradient_clip_algorithm": choice("norm", "value", null=True),
    "trainer.accumulate_grad_batches": integer(1, example=4),
    "trainer.sync_batchnorm": boolean(example="true"),
    "trainer.deterministic": either("true, false or warn", boolean(), choice("warn"), example="true", null=True),
    "trainer.benchmark": boolean(example="true", null=True),
    "trainer.fast_dev_run": either(
        "true, false or a batch count >= 0", boolean(), integer(0, example=1), example="true"
    ),
    "trainer.overfit_batches": fraction_or_count(zero=True, example=3, null=False),
    "trainer.profiler": mapping_or(
        choice("simple", "advanced", "pytorch", null=True), "simple, advanced, pytorch or a {_target_: ...} profiler"
    ),
    "trainer.enable_progress_bar": boolean(example="false"),
    "trainer.enable_model_summary": boolean(example="false"),
    "trainer.enable_checkpointing": boolean(example="false", null=True),
    "trainer.default_root_dir": text(example="logs"),
    # ---- callbacks (by the entry name each conf/callbacks option gives) ----
    "callbacks.model_checkpoint.save_top_k": integer(-1, example=3, extra=" (-1 = keep all)"),
    "callbacks.model_checkpoint.filename": text(example="'epoch{epoch:03d}'"),
    "callbacks.model_checkpoint.auto_insert_metric_name": boolean(example="false"),
    "callbacks.*.monitor": text(example="val/loss"),
    "callbacks.*.mode": choice("min", "max"),
    "callbacks.early_stopping.patience": integer(0, example=10),
    "callbacks.early_stopping.check_finite": boolean(example="true"),
    "callbacks.early_stopping.check_on_train_epoch_end": boolean(example="false"),
    "callbacks.early_stopping.stopping_threshold": number(example=499.9, null=True),
    "callbacks.lr_monitor.logging_interval": choice("epoch", "step", null=True),
    "callbacks.progress_bar.refresh_rate": integer(0, example=5, extra=" (0 = hidden)"),
    "callbacks.progress_bar.leave": boolean(example="true"),
    "callbacks.nonfinite_loss.check_every_n_steps": integer(1, example=50, null=True),
    "callbacks.checkpoint_on_signal.hang_grace": number(gt=0, example=60, null=True),
    "callbacks.checkpoint_on_signal.check_every_n_steps": integer(1, example=50, null=True),
    "callbacks.model_summary.max_depth": integer(-1, example=2, extra=" (-1 = all layers)"),
    "callbacks.tensorboard_extras.after_test": boolean(example="true"),
    "callbacks.tensorboard_extras.max_samples": integer(1, example=32),
    "callbacks.tensorboard_extras.normalize": Rule(
        "one of true, pred, all", lambda v: v is True or v in ("true", "pred", "all"), "true", null=True
    ),
    "callbacks.ema.decay": number(gt=0, lt=1, example=0.999),
    "callbacks.ema.update_every_n_steps": integer(1, example=1),
    "callbacks.ema.update_starting_at_step": integer(0, example=100, null=True),
    "callbacks.finetune.unfreeze_backbone_at_epoch": integer(0, example=5),
    "callbacks.finetune.backbone_initial_ratio_lr": number(gt=0, le=1, example=0.1),
    "callbacks.finetune.should_align": boolean(example="true"),
    "callbacks.finetune.train_bn": boolean(example="true"),
    "callbacks.pruning.method": choice("l1_unstructured", "random_unstructured", "ln_structured", "random_structured"),
    "callbacks.pruning.amount": number(ge=0, lt=1, example=0.5),
    "callbacks.pruning.start_epoch": integer(0, example=1),
    "callbacks.pruning.end_epoch": integer(0, example=5, null=True),
    "callbacks.pruning.norm": number(ge=1, example=2),
    "callbacks.pruning.exclude": Rule(
        "a list of module names", lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v), "[net.fc]"
    ),
    "callbacks.pruning.select_after_schedule": boolean(example="true"),
    "callbacks.qat.start_epoch": integer(0, example=0),
    "callbacks.qat.save": boolean(example="true"),
    "callbacks.qat.restart_selection": boolean(example="true"),
    "callbacks.text_samples.prompt": text(example="def ", empty=True),
    "callbacks.text_samples.max_new_tokens": integer(1, example=200),
    "callbacks.text_samples.temperature": number(gt=0, example=0.8),
    "callbacks.text_samples.top_k": integer(1, example=10, null=True),
    "callbacks.text_samples.every_n_epochs": integer(1, example=1),
    # ---- logger ----
    "logger.*.save_dir": text(example="logs"),
    "logger.*.name": text(example="tensorboard"),
    "logger.*.version": text(example="''", empty=True),
    "logger.*.default_hp_metric": boolean(example="false"),
    "logger.*.tracking_uri": text(example="http://127.0.0.1:5000", null=True),
    "logger.*.store_dir": text(example="logs"),
    "logger.*.experiment_name": text(example="train"),
    "logger.*.run_dir": text(example="logs/train/runs/run1", null=True),
    "logger.*.run_name": text(example="baseline", null=True),
    "logger.*.run_id": text(example="0123456789abcdef0123456789abcdef", null=True),
    "logger.*.offline": boolean(example="false"),  # logger=wandb: false uploads as it runs
    "logger.*.project": text(example="train"),
    "logger.*.log_model": either("true, false or all", boolean(example="false"), choice("all"), example="false"),
    # ---- strategy ----
    "strategy.name": text(example="auto"),
    "strategy.start_method": choice("popen", "spawn", "fork", "forkserver"),
    "strategy.process_group_backend": choice("nccl", "gloo", "mpi", "ucc", "xla", example="gloo", null=True),
    "strategy.find_unused_parameters": boolean(example="false"),
    "strategy.*_parallel_size": either("an integer >= 1 or auto", integer(1, example=2), choice("auto"), example="2"),
    "strategy.save_distributed_checkpoint": boolean(example="false"),
    "strategy.mixed_precision": choice("bf16", null=True),
    "strategy.reshard_after_forward": boolean(example="false"),
    "strategy.offload": choice("cpu", example="null", null=True),
    "strategy.replicate_size": integer(1, example=2),
    "strategy.meta_init": boolean(example="false"),
    "strategy.period": integer(1, example=4),
    "strategy.warmup_steps": integer(0, example=100),
    "strategy.sync_every": integer(1, example=32),
    "strategy.outer_lr": number(gt=0, example=0.7),
    "strategy.outer_momentum": number(ge=0, lt=1, example=0.9),
    "strategy.decide_every": integer(1, example=100),
}


@dataclass(frozen=True)
class Relation:
    """A check on several keys together; runs when all of `keys` are in the config (values may be null)."""

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    message: str  # format string: {0}, {1}, ... are the values of `keys`, written as on the command line


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
        lambda enabled, target: enabled is not False or not str(target).endswith("ModelCheckpoint"),
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
        lambda sync, target: not sync or not str(target).endswith("ModelParallel"),
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
        lambda target, micro, batch: (
            not str(target).endswith("Pipeline")
            or not isinstance(micro, int)
            or not isinstance(batch, int)
            or micro < 1
            or batch % micro == 0
        ),
        "data.batch_size={2} is not divisible by strategy.microbatches={1}: use a multiple, e.g. data.batch_size={1}0",
    ),
    Relation(
        ("strategy._target_", "strategy.data_parallel", "trainer.devices", "trainer.num_nodes"),
        lambda target, dp, devices, nodes: (
            not str(target).endswith("Pipeline")
            or not isinstance(dp, int)
            or not isinstance(devices, int)
            or not isinstance(nodes, int)
            or dp < 1
            or devices * nodes % dp == 0
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
        lambda accelerator, target: not str(target).endswith("Hogwild") or str(accelerator) not in ("gpu", "cuda"),
        "trainer.accelerator={0} with strategy=hogwild: hogwild runs CPU worker processes sharing host memory "
        "only; use trainer=cpu, or strategy=ddp on GPUs",
    ),
    # FSDP2's fully_shard refuses non-contiguous parameters, and channels_last weights are not contiguous
    Relation(
        ("channels_last", "strategy._target_"),
        lambda nhwc, target: not nhwc or not str(target).endswith("ModelParallel"),
        "channels_last={0} fails under strategy._target_={1} (FSDP2 shards only contiguous parameters): pass "
        "channels_last=false, or strategy=ddp with channels_last=true",
    ),
)


# ---- checking --------------------------------------------------------------------------------------------------------
_EXACT = {k: r for k, r in RULES.items() if not any(c in k for c in "*?[")}
_PATTERNS = [(re.compile(fnmatch.translate(k)), r) for k, r in RULES.items() if k not in _EXACT]
_MISSING = object()


def rule_for(key: str) -> Rule | None:
    """The rule of a full key (`data.batch_size`); None when the table has none."""
    rule = _EXACT.get(key)
    if rule is None:
        rule = next((r for pattern, r in _PATTERNS if pattern.match(key)), None)
    return rule


def check_value(key: str, value: Any) -> None:
    """Raise ConfigError when `value` does not fit the rule of `key` (a key without a rule takes anything)."""
    rule = rule_for(key)
    message = rule.problem(key, value) if rule is not None else None
    if message:
        raise ConfigError(message)


def check_group(scope: str, node: Any, bind: bool = True) -> None:
    """Check one group as it is built: `scope` is `data`, `trainer`, ... or `callbacks.<name>` for one entry."""
    if node is None:
        return
    check_reachable(scope, node)
    check_package(scope, node)
    for key, value in leaves(scope, node):
        check_value(key, value)
    for key, sub in targets(scope, node) if bind else ():
        check_target(key, sub)
    prefix = scope + "."
    for relation in RELATIONS:
        if _scope_of(relation) == scope:
            _check_relation(relation, lambda key: _lookup(node, key[len(prefix) :]))


def check_package(scope: str, node: Any) -> None:
    """Refuse a group whose `_target_` needs an optional package that is not importable (see NEEDS_PACKAGE)."""
    import importlib.util

    target = _lookup(node, "_target_")
    module, install = NEEDS_PACKAGE.get(target, (None, None)) if isinstance(target, str) else (None, None)
    if module is None:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"{scope} needs the {module} package, which is not installed: pip install {install}, "
            f"or choose another logger (e.g. logger=tensorboard)"
        )


def check_reachable(scope: str, node: Any) -> None:
    """A tracking server that does not answer: MLflow would retry for minutes, then fail inside fit."""
    import socket
    from urllib.parse import urlsplit

    uri = _lookup(node, "tracking_uri")
    if not isinstance(uri, str) or not uri.startswith(("http://", "https://")):
        return
    url = urlsplit(uri)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3).close()
    except OSError as exc:
        raise ConfigError(
            f"{scope}.tracking_uri={uri}: no server answers there ({exc.strerror or exc}): start it "
            f"(mlflow server --port {url.port or 5000}), or pass {scope}.tracking_uri=null for the "
            "local store"
        ) from None


def targets(prefix: str, node: Any) -> Iterator[tuple[str, Any]]:
    """(key, node) of every mapping with a `_target_` at or under `node`."""
    if not (isinstance(node, Mapping) or OmegaConf.is_dict(node)):
        return
    if "_target_" in node:
        yield prefix, node
    for key in node.keys():
        try:
            yield from targets(f"{prefix}.{key}", node[key])
        except Exception:  # an interpolation that resolves only inside a Hydra job
            continue


def check_run(cfg: Any) -> None:
    """Check what a job reads itself (top-level keys, `paths`) and the relations between groups."""
    if cfg is None:
        return
    for key, value in leaves("", cfg, skip=(*BUILT_GROUPS, *NOT_CHECKED)):
        check_value(key, value)
    for relation in RELATIONS:
        if _scope_of(relation) is None:
            _check_relation(relation, lambda key: _lookup(cfg, key))


def check_config(cfg: Any) -> None:
    """Everything, in the order the job builds it: what preflight runs on the composed command-line config. The
    table's checks of every group come first, then the signatures (which import the targets, torch with them)."""
    check_moved_keys(cfg)
    check_run(cfg)
    for bind in (False, True):
        for group in BUILT_GROUPS:
            node = cfg.get(group) if isinstance(cfg, Mapping) or OmegaConf.is_dict(cfg) else None
            if node is None:
                continue
            if group in NAMED_GROUPS:
                for name in node:
                    check_group(f"{group}.{name}", node[name], bind)
            else:
                check_group(group, node, bind)


def group_scope(key: str) -> str | None:
    """The builder scope a full key belongs to: `data`, `callbacks.<name>`; None for what the job reads itself."""
    parts = key.split(".")
    if parts[0] not in BUILT_GROUPS:
        return None
    return ".".join(parts[:2]) if parts[0] in NAMED_GROUPS and len(parts) > 2 else parts[0]


def _scope_of(relation: Relation) -> str | None:
    scopes = {group_scope(k) for k in relation.keys}
    return scopes.pop() if len(scopes) == 1 else None


def _check_relation(relation: Relation, lookup: Callable[[str], Any]) -> None:
    values = [lookup(key) for key in relation.keys]
    if any(v is _MISSING for v in values):
        return
    for key, value in zip(relation.keys, values, strict=True):
        check_value(key, value)  # the single-key rules first: a relation may assume well-typed values
    if not relation.holds(*values):
        raise ConfigError(relation.message.format(*(shown(v, quote=False) for v in values)))


def _lookup(node: Any, key: str) -> Any:
    """The value at dotted `key` under `node` (resolved), or _MISSING when a part is absent or cannot resolve."""
    for part in key.split("."):
        if node is None or not (isinstance(node, Mapping) or OmegaConf.is_dict(node)) or part not in node.keys():
            return _MISSING
        try:
            node = node[part]
        except Exception:  # an interpolation that resolves only inside a Hydra job
            return _MISSING
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def leaves(prefix: str, node: Any, skip: Sequence[str] = ()) -> Iterator[tuple[str, Any]]:
    """(full key, value) of every value under `node`, resolved; nested mappings are walked, a list is one value.

    Keys starting with `_` (Hydra's `_target_`, `_partial_`) are Hydra's, not the user's. A value that does not
    resolve yet (`${hydra:runtime.output_dir}` before Hydra runs a job) is skipped: it is checked when it does.
    A required value left out (`???`) is refused here, naming the key.
    """
    if not (isinstance(node, Mapping) or OmegaConf.is_dict(node)):
        return
    for key in list(node.keys()):
        key = str(key)
        if key.startswith("_") or (not prefix and key in skip):
            continue
        full = f"{prefix}.{key}" if prefix else key
        if OmegaConf.is_missing(node, key) if OmegaConf.is_dict(node) else node[key] == "???":
            rule = rule_for(full)
            example = rule.example if rule else "<value>"
            raise ConfigError(f"{full} has no value and is required: pass {full}=<value>, e.g. {full}={example}")
        try:
            value = node[key]
            if OmegaConf.is_list(value):
                value = OmegaConf.to_container(value, resolve=True)
        except Exception:  # an interpolation that resolves only inside a Hydra job
            continue
        if isinstance(value, Mapping) or OmegaConf.is_dict(value):
            yield from leaves(full, value)
        else:
            yield full, value


# ---- useless runs: allowed, but said clearly -------------------------------------------------------------------------
def run_notes(cfg: Any) -> list[str]:
    """What a valid training config will not do although a user may expect it (e.g. no validation at all)."""
    trainer = cfg.get("trainer") or {}
    notes = []
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if _is_zero(trainer.get("limit_val_batches")):
        why = "trainer.limit_val_batches=0"
    elif _is_zero((cfg.get("data") or {}).get("val_fraction")):
        why = "data.val_fraction=0"
    elif _is_int(every) and _is_int(epochs) and 0 < epochs < every and not trainer.get("fast_dev_run"):
        why = f"trainer.check_val_every_n_epoch={every} > trainer.max_epochs={epochs}"
    else:
        why = ""
    if why:
        tested = " and tested" if cfg.get("test_after_training", True) else ""
        notes.append(
            f"no validation in this run ({why}): no best checkpoint, no early stopping and no objective "
            f"value; the last weights are saved{tested}"
        )
    return notes


# ---- moved keys ------------------------------------------------------------------------------------------------------
def moved_key_message(old: str, value: Any = "<value>") -> str:
    new = MOVED_KEYS[old]
    return f"{old} has moved to {new}: pass {new}={value} instead"


def check_moved_keys(cfg: Any) -> None:
    """Refuse a composed config (e.g. from a user's own YAML) that still sets a key under its old name."""
    for old in MOVED_KEYS:
        value = OmegaConf.select(cfg, old, throw_on_missing=False) if OmegaConf.is_config(cfg) else None
        if value is not None:
            raise ConfigError(moved_key_message(old, value))
