"""What the jobs read from the top of their config (not a group's `_target_`): one pydantic model, beside them.

A key has one meaning in every job that reads it; the config check (litforge.config.check) judges the top level
against :class:`JobSettings` as it judges a group against its class's signature. Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Predicate
from pydantic import BaseModel, ConfigDict, Field

from litforge.core.bounds import Count, NonNegative, Positive, Seed
from litforge.runtime.durations import is_time_limit, parse_every

Device = Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto, cpu, cuda or cuda:<index>")]
Compile = Annotated[
    bool | Literal["blocks"] | dict[str, Any],
    Field(description="true, false, blocks (each block compiled on its own) or a mapping of torch.compile options"),
]
Every = Annotated[
    Count | str | None,
    Predicate(lambda v: not isinstance(v, str) or parse_every(v) is not None),
    Field(description="a step count >= 1 or a duration (30min, 2h, 90s)", examples=[500]),
]
TimeLimit = Annotated[
    str | None,
    Predicate(lambda v: v is None or is_time_limit(v)),
    Field(description="auto or a duration (3h55min, 30min, 04:00:00)", examples=["3h55min"]),
]


class Section(BaseModel):
    """A mapping of settings under one key (`paths`, `tune`, ...): its keys are fixed."""

    model_config = ConfigDict(strict=True, extra="forbid")


class Objective(Section):
    metric: str = "val/loss"  # what picks the best checkpoint, early-stops and ranks sweeps
    mode: Literal["min", "max"] = "min"


class Paths(Section):
    data_dir: str = "data"
    log_dir: str = "logs"
    min_free_mb: NonNegative = 200
    output_dir: str | None = None


class Tune(Section):  # Lightning's finders before training (litforge.jobs.tuning); which keys apply depends on finder
    finder: Literal["none", "lr_find", "batch_size"] = "none"
    apply: bool = True
    min_lr: Positive = 1e-6
    max_lr: Positive = 1.0
    num_training: Annotated[int, Field(ge=13, examples=[100])] = 100  # the suggestion skips the first 10 and the last
    mode: Literal["exponential", "linear", "power", "binsearch"] = "exponential"
    early_stop_threshold: Annotated[float, Field(gt=1, examples=[4.0])] | None = 4.0
    init_val: Count = 2
    max_trials: Count = 25
    steps_per_trial: Count = 3
    max_val: Count = 8192


class Calibration(Section):
    size: Count = 512
    batch_size: Count = 64


class Parity(Section):
    atol: Annotated[float, Field(ge=0, examples=[1e-4])] = 1e-4
    min_agreement: Annotated[float, Field(ge=0, le=1)] = 0.999


class Report(Section):
    batch_sizes: Annotated[list[Count], Field(min_length=1, examples=[[1, 64]])] = [1, 64]
    threads: list[int | Literal["all"]] = [1, "all"]
    rounds: Count = 15
    max_acc_drop: NonNegative = 0.01


class JobSettings(Section):
    model_config = ConfigDict(strict=True, extra="ignore")  # the groups sit beside these keys
    # every job
    task_name: str = "train"
    seed: Seed = 42
    print_config: bool = False
    ckpt_path: str | None = None
    trusted_packages: list[str] = []  # eval, predict, export, generate: see checkpointing.load
    paths: Paths | None = None
    # train
    resume: str | None = None  # auto | <run folder> | <file.ckpt>
    test_after_training: bool = True
    tags: Annotated[list[str | int], Field(description="a list of labels", examples=[["mnist", "baseline"]])] = []
    compile: Compile = False
    channels_last: bool = False
    activation_checkpointing: Literal["none", "full", "selective"] = "none"
    float8: Literal["none", "tensorwise", "rowwise"] = "none"  # litforge.models.float8
    dry_run: bool = False  # plan one step on fake ranks and print bytes per rank (litforge.parallel.dry_run)
    dry_run_gpu: str = "h100"  # its per-rank budget: a GPU of litforge.runtime.flops.GPU_MEMORY_GIB (checked there)
    dry_run_memory_gib: Annotated[float, Field(gt=0, le=4096, examples=[40])] | None = None  # else dry_run_gpu's
    matmul_precision: Literal["highest", "high", "medium"] = "high"
    steps_per_call: Annotated[int, Field(ge=1, examples=[4])] | Literal["auto"] = 1
    checkpoint_every: Every = None
    checkpoint_async: bool = False
    time_limit: TimeLimit = "auto"
    objective: Objective | None = None
    tune: Tune | None = None
    # predict
    input: str | None = None
    output: str | None = None  # also prepare's (a folder or object-store URL)
    batch_size: Annotated[int, Field(ge=1, examples=[256])] = 256
    device: Device = "auto"  # also generate's
    # generate
    prompt: str = ""
    max_new_tokens: Count = 500
    temperature: Annotated[float, Field(gt=0, examples=[0.8])] = 0.8
    top_k: Annotated[int, Field(ge=1, examples=[10])] | None = None
    num_samples: Count = 1
    # export
    formats: list[str] = ["onnx"]  # which: litforge.jobs.export
    input_dtype: Literal["uint8", "float32"] = "uint8"
    opset: Annotated[int, Field(ge=7, examples=[20])] | None = None
    quantize: list[str] = []
    calibration: Calibration | None = None
    parity: Parity | None = None
    report: Report | None = None
    # prepare (LitData shards)
    overwrite: bool = False
    chunk_bytes: Annotated[str | Count, Field(description="a size like 64MB", examples=["64MB"])] = "64MB"
    num_workers: Count = 1
    start_method: Literal["fork", "spawn", "forkserver"] | None = None
    storage_options: dict[str, Any] = {}
