"""What litforge bounds in the library classes its configs build: typed stand-ins for their signatures.

A litforge class says what each argument takes in its own annotated constructor (litforge.core.bounds). Torch's,
Lightning's and Hydra's classes cannot be annotated here, and their signatures give types at most (`lr: float`,
`max_epochs: int | None`), never ranges (a `step_size=0` ends in a ZeroDivisionError deep inside fit). Each function
below stands in for one library target, named by its `_target_` (or by the group for one built without a
`_target_`): its annotated arguments are checked with the target's own signature, which still judges every other
argument and the unknown ones (litforge.config.signatures.check_target). Torch-free, so a mistake in these is refused
before torch is imported. Only arguments litforge's configs set are listed; the rest keep the library's types.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from litforge.core.bounds import Check, Count, NonNegative, Positive, Range

STAND_INS: dict[str, Callable[..., None]] = {}

Fraction = Annotated[float, Range(ge=0, lt=1)]  # [0, 1)
NO_LIMIT = (-1,)


def stands_in_for(*targets: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(function: Callable[..., None]) -> Callable[..., None]:
        for target in targets:
            STAND_INS[target] = function
        return function

    return register


def _batches(zero: bool) -> Callable[[Any], bool]:
    """Lightning's `limit_*_batches` style: a float fraction of the batches, or an int count of them."""
    return lambda v: (
        v is None or (0 <= v if zero else 0 < v) and v <= 1 if isinstance(v, float) else _int(v, int(not zero))
    )


Batches = Annotated[float | int | None, Check(_batches(zero=False), "a fraction in (0, 1] or a batch count >= 1", 0.5)]
BatchesOrNone = Annotated[
    float | int | None, Check(_batches(zero=True), "a fraction in [0, 1] or a batch count >= 0", 0)
]


# Lightning's precision names (lightning_fabric.connector._PRECISION_INPUT; tests/test_validation.py compares)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine")
PRECISIONS_OLD = ("transformer-engine-float16", 64, 32, 16, "64", "32", "16", "bf16")  # still taken


def _int(v: Any, lo: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _devices(v: Any) -> bool:
    return (
        v == "auto"
        or _int(v, 1)
        or v == -1
        and not isinstance(v, bool)
        or isinstance(v, list)
        and bool(v)
        and all(_int(x, 0) for x in v)
        or isinstance(v, str)
        and re.fullmatch(r"-?\d+(,\d+)*,?", v) is not None
    )


# ---- the Trainer (the `trainer` group: keyword arguments of pytorch_lightning.Trainer) -------------------------------
@stands_in_for("trainer", "pytorch_lightning.Trainer")
def trainer(
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps", "tpu"] = "auto",
    devices: Annotated[Any, Check(_devices, "a count >= 1, -1 (all), auto, or a list of device ids", 1)] = "auto",
    num_nodes: Count = 1,
    precision: Annotated[
        Any,
        Check(
            lambda v: any(type(v) is type(p) and v == p for p in PRECISIONS + PRECISIONS_OLD),
            "a Lightning precision: " + ", ".join(PRECISIONS) + " (or 32, 16, 64, bf16)",
            "bf16-mixed",
        ),
    ] = "32-true",
    max_epochs: Annotated[int | None, Range(ge=1, also=NO_LIMIT, example=30)] = None,
    min_epochs: Annotated[int | None, Range(ge=0)] = None,
    max_steps: Annotated[int, Range(ge=1, also=NO_LIMIT, example=1000)] = -1,
    limit_train_batches: Batches = None,
    limit_val_batches: BatchesOrNone = None,  # 0 = no validation
    limit_test_batches: Batches = None,
    val_check_interval: Batches = None,
    check_val_every_n_epoch: Annotated[int | None, Range(ge=1)] = 1,
    num_sanity_val_steps: Annotated[int, Range(ge=-1)] = 2,
    log_every_n_steps: Count = 50,
    gradient_clip_val: Annotated[float | None, Range(ge=0)] = None,
    gradient_clip_algorithm: Literal["norm", "value"] | None = None,
    accumulate_grad_batches: Count = 1,
    deterministic: bool | Literal["warn"] | None = None,
    fast_dev_run: Annotated[bool | int, Range(ge=0)] = False,
    overfit_batches: BatchesOrNone = 0.0,
    profiler: Literal["simple", "advanced", "pytorch"] | dict[str, Any] | None = None,
    default_root_dir: str | None = None,
    plugins: list[dict[str, Any]] | None = None,  # each a `_target_` node, checked on its own
) -> None: ...


@stands_in_for("strategy")
def strategy(name: str = "auto") -> None:
    """The `strategy` group without a `_target_`: a strategy Lightning knows by name (auto, ddp, xla, ...)."""


# ---- optimizers (the task passes the parameters) --------------------------------------------------------------------
Lr = Annotated[float, Range(gt=0, example=0.001)]


@stands_in_for("torch.optim.AdamW", "torch.optim.Adam")
def adam(
    lr: Lr = 0.001,
    weight_decay: NonNegative = 0.0,
    betas: Annotated[
        list[float],
        Check(lambda v: len(v) == 2 and all(0 <= x < 1 for x in v), "a list of 2 numbers in [0, 1)", [0.9, 0.999]),
    ] = [0.9, 0.999],  # noqa: B006 (never called)
) -> None: ...


@stands_in_for("torch.optim.SGD")
def sgd(
    lr: Lr = 0.001,
    weight_decay: NonNegative = 0.0,
    momentum: Annotated[float, Range(ge=0, lt=1, example=0.9)] = 0.0,
    nesterov: bool = False,
) -> None: ...


# ---- learning-rate schedules (the task passes the optimizer) ---------------------------------------------------------
@stands_in_for("scheduler")
def schedule(interval: Literal["epoch", "step"] = "epoch", monitor: str = "val/loss", scheduler: Any = None) -> None:
    """The `scheduler` group: the schedule (`scheduler.scheduler`) and when the task steps it."""


@stands_in_for("torch.optim.lr_scheduler.CosineAnnealingLR")
def cosine(T_max: Annotated[int | None, Range(ge=1, example=30)] = None, eta_min: NonNegative = 0.0) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.OneCycleLR")
def one_cycle(
    max_lr: Annotated[float | None, Range(gt=0)] = None,
    total_steps: Annotated[int | None, Range(ge=1)] = None,
    pct_start: Annotated[float, Range(gt=0, lt=1)] = 0.25,
) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.ReduceLROnPlateau")
def plateau(
    mode: Literal["min", "max"] = "min",
    factor: Annotated[float, Range(gt=0, lt=1)] = 0.1,
    patience: Annotated[int, Range(ge=0)] = 10,
) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.StepLR")
def step(step_size: Count = 10, gamma: Positive = 0.1) -> None: ...


# ---- losses ----------------------------------------------------------------------------------------------------------
@stands_in_for("torch.nn.CrossEntropyLoss")
def cross_entropy(label_smoothing: Fraction = 0.0) -> None: ...


@stands_in_for("torch.nn.HuberLoss")
def huber(delta: Positive = 1.0) -> None: ...


# ---- strategies ------------------------------------------------------------------------------------------------------
@stands_in_for("pytorch_lightning.strategies.DDPStrategy")
def ddp(
    start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
    process_group_backend: Literal["nccl", "gloo", "mpi", "ucc", "xla"] | None = None,
    find_unused_parameters: bool = False,
) -> None: ...


# ---- callbacks and loggers (Lightning's classes the conf/callbacks and conf/logger options name) --------------------

Monitor = str  # a logged metric's name, e.g. val/loss
Mode = Literal["min", "max"]


@stands_in_for("pytorch_lightning.callbacks.ModelCheckpoint")
def model_checkpoint(
    save_top_k: Annotated[int, Range(ge=-1, example=3)] = 1,  # -1 = keep all
    mode: Mode = "min",
    monitor: Monitor | None = None,
    filename: str | None = None,
    auto_insert_metric_name: bool = True,
) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.EarlyStopping")
def early_stopping(
    monitor: Monitor = "val/loss",
    mode: Mode = "min",
    patience: Annotated[int, Range(ge=0)] = 3,
    check_finite: bool = True,
    check_on_train_epoch_end: bool | None = None,
    stopping_threshold: float | None = None,
) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.LearningRateMonitor")
def lr_monitor(logging_interval: Literal["epoch", "step"] | None = None) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.RichModelSummary", "pytorch_lightning.callbacks.ModelSummary")
def model_summary(max_depth: Annotated[int, Range(ge=-1)] = 1) -> None: ...  # -1 = every layer


@stands_in_for("pytorch_lightning.callbacks.EMAWeightAveraging")
def ema(
    decay: Annotated[float, Range(gt=0, lt=1, example=0.999)] = 0.999,
    update_every_n_steps: Count = 1,
    update_starting_at_step: Annotated[int, Range(ge=0)] | None = None,
) -> None: ...


@stands_in_for("pytorch_lightning.loggers.TensorBoardLogger", "pytorch_lightning.loggers.CSVLogger")
def file_logger(save_dir: str = ".", name: str | None = None, version: str | int | None = None) -> None: ...
