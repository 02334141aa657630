"""Typed bounds for the library classes litforge's configs build, which cannot be annotated here.

Torch's and Lightning's signatures give types at most (`lr: float`), never ranges (a `step_size=0` ends in a
ZeroDivisionError deep inside fit). Each function below stands in for one library target, named by its `_target_` (or
by the group for one built without a `_target_`): its annotated arguments bound the target's, whose own signature
still judges every other argument and the unknown keys. Torch-free, so these are judged before torch is imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from litforge.core.bounds import Count, NonNegative, NonNegativeInt, Positive

STAND_INS: dict[str, Callable[..., None]] = {}


def stands_in_for(*targets: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(function: Callable[..., None]) -> Callable[..., None]:
        STAND_INS.update(dict.fromkeys(targets, function))
        return function

    return register


def _device_ids(text: str) -> str:
    if not re.fullmatch(r"-?\d+(,\d+)*,?", text) and text != "auto":
        raise ValueError("not a device list")
    return text


# Lightning's `limit_*_batches`: a float is a fraction of the batches, an int a count of them
Batches = Annotated[
    Annotated[float, Field(gt=0, le=1)] | Count | None,
    Field(description="a fraction in (0, 1] or a batch count >= 1", examples=[0.5]),
]
BatchesOrNone = Annotated[
    Annotated[float, Field(ge=0, le=1)] | NonNegativeInt | None,
    Field(description="a fraction in [0, 1] or a batch count >= 0", examples=[0]),
]
Devices = Annotated[
    Count
    | Literal[-1]
    | Annotated[str, AfterValidator(_device_ids)]
    | Annotated[list[NonNegativeInt], Field(min_length=1)],
    Field(description="a count >= 1, -1 (all), auto, or a list of device ids", examples=[1]),
]
# Lightning's precision names (lightning_fabric.connector._PRECISION_INPUT; tests/test_validation.py compares)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine")
PRECISIONS_OLD = ("transformer-engine-float16", 64, 32, 16, "64", "32", "16", "bf16")  # still taken
Precision = Annotated[
    Literal[PRECISIONS + PRECISIONS_OLD],  # type: ignore[valid-type]
    Field(
        description="a Lightning precision: " + ", ".join(PRECISIONS) + " (or 32, 16, 64, bf16)",
        examples=["bf16-mixed"],
    ),
]
Fraction = Annotated[float, Field(ge=0, lt=1)]


@stands_in_for("trainer", "pytorch_lightning.Trainer")
def trainer(
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps", "tpu"] = "auto",
    devices: Devices = "auto",
    num_nodes: Count = 1,
    precision: Precision = "32-true",
    max_epochs: Annotated[int, Field(ge=1, examples=[30])] | Literal[-1] | None = None,
    min_epochs: NonNegativeInt | None = None,
    max_steps: Annotated[int, Field(ge=1, examples=[1000])] | Literal[-1] = -1,
    limit_train_batches: Batches = None,
    limit_val_batches: BatchesOrNone = None,  # 0 = no validation
    limit_test_batches: Batches = None,
    val_check_interval: Batches = None,
    check_val_every_n_epoch: Count | None = 1,
    num_sanity_val_steps: Annotated[int, Field(ge=-1)] = 2,
    log_every_n_steps: Count = 50,
    gradient_clip_val: NonNegative | None = None,
    gradient_clip_algorithm: Literal["norm", "value"] | None = None,
    accumulate_grad_batches: Count = 1,
    deterministic: bool | Literal["warn"] | None = None,
    fast_dev_run: bool | NonNegativeInt = False,
    overfit_batches: BatchesOrNone = 0.0,
    profiler: Literal["simple", "advanced", "pytorch"] | dict[str, Any] | None = None,
    default_root_dir: str | None = None,
    plugins: list[dict[str, Any]] | None = None,  # each a `_target_` node, checked on its own
) -> None: ...


@stands_in_for("strategy")
def strategy(name: str = "auto") -> None:
    """The `strategy` group without a `_target_`: a strategy Lightning knows by name (auto, ddp, xla, ...)."""


Lr = Annotated[float, Field(gt=0, examples=[0.001])]
Betas = Annotated[list[Fraction], Field(min_length=2, max_length=2, examples=[[0.9, 0.999]])]


@stands_in_for("torch.optim.AdamW", "torch.optim.Adam")
def adam(lr: Lr = 0.001, weight_decay: NonNegative = 0.0, betas: Betas = [0.9, 0.999]) -> None: ...  # noqa: B006


@stands_in_for("torch.optim.SGD")
def sgd(
    lr: Lr = 0.001,
    weight_decay: NonNegative = 0.0,
    momentum: Annotated[float, Field(ge=0, lt=1, examples=[0.9])] = 0.0,
    nesterov: bool = False,
) -> None: ...


@stands_in_for("scheduler")
def schedule(interval: Literal["epoch", "step"] = "epoch", monitor: str = "val/loss", scheduler: Any = None) -> None:
    """The `scheduler` group: the schedule (`scheduler.scheduler`) and when the task steps it."""


@stands_in_for("torch.optim.lr_scheduler.CosineAnnealingLR")
def cosine(T_max: Annotated[int, Field(ge=1, examples=[30])] | None = None, eta_min: NonNegative = 0.0) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.OneCycleLR")
def one_cycle(
    max_lr: Positive | None = None,
    total_steps: Count | None = None,
    pct_start: Annotated[float, Field(gt=0, lt=1)] = 0.25,
) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.ReduceLROnPlateau")
def plateau(
    mode: Literal["min", "max"] = "min",
    factor: Annotated[float, Field(gt=0, lt=1)] = 0.1,
    patience: NonNegativeInt = 10,
) -> None: ...


@stands_in_for("torch.optim.lr_scheduler.StepLR")
def step(step_size: Count = 10, gamma: Positive = 0.1) -> None: ...


@stands_in_for("torch.nn.CrossEntropyLoss")
def cross_entropy(label_smoothing: Fraction = 0.0) -> None: ...


@stands_in_for("torch.nn.HuberLoss")
def huber(delta: Positive = 1.0) -> None: ...


@stands_in_for("pytorch_lightning.strategies.DDPStrategy")
def ddp(
    start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
    process_group_backend: Literal["nccl", "gloo", "mpi", "ucc", "xla"] | None = None,
    find_unused_parameters: bool = False,
) -> None: ...


Mode = Literal["min", "max"]


@stands_in_for("pytorch_lightning.callbacks.ModelCheckpoint")
def model_checkpoint(
    save_top_k: Annotated[int, Field(ge=-1, examples=[3])] = 1,  # -1 = keep all
    mode: Mode = "min",
    monitor: str | None = None,  # a logged metric's name, e.g. val/loss
    filename: str | None = None,
    auto_insert_metric_name: bool = True,
) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.EarlyStopping")
def early_stopping(
    monitor: str = "val/loss",
    mode: Mode = "min",
    patience: NonNegativeInt = 3,
    check_finite: bool = True,
    check_on_train_epoch_end: bool | None = None,
    stopping_threshold: float | None = None,
) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.LearningRateMonitor")
def lr_monitor(logging_interval: Literal["epoch", "step"] | None = None) -> None: ...


@stands_in_for("pytorch_lightning.callbacks.RichModelSummary", "pytorch_lightning.callbacks.ModelSummary")
def model_summary(max_depth: Annotated[int, Field(ge=-1)] = 1) -> None: ...  # -1 = every layer


@stands_in_for("pytorch_lightning.callbacks.EMAWeightAveraging")
def ema(
    decay: Annotated[float, Field(gt=0, lt=1, examples=[0.999])] = 0.999,
    update_every_n_steps: Count = 1,
    update_starting_at_step: NonNegativeInt | None = None,
) -> None: ...


@stands_in_for("pytorch_lightning.loggers.TensorBoardLogger", "pytorch_lightning.loggers.CSVLogger")
def file_logger(save_dir: str = ".", name: str | None = None, version: str | int | None = None) -> None: ...
