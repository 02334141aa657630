"""Typed bounds for the library classes litforge's configs build, which cannot be annotated here.

Torch's and Lightning's signatures give types at most (`lr: float`), never ranges (`step_size=0` ends in a
ZeroDivisionError inside fit). One row per library target (by `_target_`, or by the group built without one),
torch-free, naming only the arguments whose bound or choices the library's own annotation lacks; the target's own
signature judges the rest and the unknown keys.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from litforge.core.bounds import Count, NonNegative, NonNegativeInt, Positive

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
    | Annotated[str, Field(pattern=r"^(-?\d+(,\d+)*,?|auto)$")]
    | Annotated[list[NonNegativeInt], Field(min_length=1)],
    Field(description="a count >= 1, -1 (all), auto, or a list of device ids", examples=[1]),
]
# Lightning's precision names (lightning_fabric.connector._PRECISION_INPUT; tests/test_validation.py compares)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine")
PRECISIONS_OLD = ("transformer-engine-float16", 64, 32, 16, "64", "32", "16", "bf16")  # still taken
Precision: Any = Annotated[
    Literal[PRECISIONS + PRECISIONS_OLD],
    Field(description=f"a Lightning precision: {', '.join(PRECISIONS)} (or 32, 16, 64, bf16)", examples=["bf16-mixed"]),
]
Fraction = Annotated[float, Field(ge=0, lt=1)]
Open = Annotated[float, Field(gt=0, lt=1)]
Mode = Literal["min", "max"]
Lr = Annotated[float, Field(gt=0, examples=[0.001])]
NoLimit = Literal[-1]
OPTIMIZER = {"lr": Lr, "weight_decay": NonNegative}

STAND_INS: dict[str, dict[str, Any]] = {
    "trainer": {
        "accelerator": Literal["auto", "cpu", "gpu", "cuda", "mps", "tpu"],
        "devices": Devices,
        "num_nodes": Annotated[
            int, Field(ge=1, le=32_768, examples=[2])
        ],  # past any real cluster (~25,000 8-GPU nodes)
        "precision": Precision,
        "max_epochs": Annotated[int, Field(ge=1, examples=[30])] | NoLimit | None,
        "min_epochs": NonNegativeInt | None,
        "max_steps": Annotated[int, Field(ge=1, examples=[1000])] | NoLimit,
        "limit_train_batches": Batches,
        "limit_val_batches": BatchesOrNone,  # 0 = no validation
        "limit_test_batches": Batches,
        "val_check_interval": Batches,
        "check_val_every_n_epoch": Count | None,
        "num_sanity_val_steps": Annotated[int, Field(ge=-1)],
        "log_every_n_steps": Count,
        "gradient_clip_val": NonNegative | None,
        "gradient_clip_algorithm": Literal["norm", "value"] | None,
        "accumulate_grad_batches": Count,
        "sync_batchnorm": bool | Literal["auto"],  # auto: on CUDA, off on CPU (litforge.runtime.devices.build_trainer)
        "fast_dev_run": bool | NonNegativeInt,
        "overfit_batches": BatchesOrNone,
        "profiler": Literal["simple", "advanced", "pytorch"] | dict[str, Any] | None,
        "plugins": list[dict[str, Any]] | None,  # each a `_target_` node, checked on its own
    },
    "strategy": {"name": str},  # the group without a `_target_`: a strategy Lightning knows by name
    "torch.optim.AdamW": OPTIMIZER
    | {"betas": Annotated[list[Fraction], Field(min_length=2, max_length=2, examples=[[0.9, 0.999]])]},
    "torch.optim.SGD": OPTIMIZER | {"momentum": Annotated[float, Field(ge=0, lt=1, examples=[0.9])]},
    # the `scheduler` group: the schedule (`scheduler.scheduler`, a node of its own) and when the task steps it
    "scheduler": {"interval": Literal["epoch", "step"], "monitor": str, "scheduler": Any},
    "torch.optim.lr_scheduler.CosineAnnealingLR": {"T_max": Count | None, "eta_min": NonNegative},
    "torch.optim.lr_scheduler.OneCycleLR": {"max_lr": Positive | None, "total_steps": Count | None, "pct_start": Open},
    "torch.optim.lr_scheduler.ReduceLROnPlateau": {"factor": Open, "patience": NonNegativeInt},
    "torch.optim.lr_scheduler.StepLR": {"step_size": Count, "gamma": Positive},
    "torch.nn.CrossEntropyLoss": {"label_smoothing": Fraction},
    "torch.nn.HuberLoss": {"delta": Positive},
    "pytorch_lightning.strategies.DDPStrategy": {
        "process_group_backend": Literal["nccl", "gloo", "mpi", "ucc", "xla"] | None,
        "find_unused_parameters": bool,
    },
    "pytorch_lightning.callbacks.ModelCheckpoint": {
        "save_top_k": Annotated[int, Field(ge=-1, examples=[3])],  # -1 = keep all
        "mode": Mode,
    },
    "pytorch_lightning.callbacks.EarlyStopping": {
        "mode": Mode,
        "patience": NonNegativeInt,
    },
    "pytorch_lightning.callbacks.ModelSummary": {"max_depth": Annotated[int, Field(ge=-1)]},  # -1 = every layer
    "pytorch_lightning.callbacks.EMAWeightAveraging": {
        "decay": Annotated[float, Field(gt=0, lt=1, examples=[0.999])],
        "update_every_n_steps": Count,
        "update_starting_at_step": NonNegativeInt | None,
    },
}
STAND_INS["pytorch_lightning.Trainer"] = STAND_INS["trainer"]
STAND_INS["torch.optim.Adam"] = STAND_INS["torch.optim.AdamW"]
for summary in ("pytorch_lightning.callbacks.RichModelSummary", "litforge.callbacks.throughput.EagerModelSummary"):
    STAND_INS[summary] = STAND_INS["pytorch_lightning.callbacks.ModelSummary"]
