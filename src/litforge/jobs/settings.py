"""What the jobs read from the top of their config (not a group's `_target_`): typed and bounded here, beside them.

One structured config for every job's own keys (train's `seed`, `resume`, `time_limit`; predict's `input`; export's
`parity`; ...): a key has one meaning in every job that reads it. litforge.config.validation binds the composed
config's top level to :class:`JobSettings` exactly as it binds a group to its class's signature, before anything is
built. Torch-free, so a mistake here is refused before torch is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from litforge.config.durations import is_time_limit, parse_every
from litforge.core.bounds import Check, Count, Positive, Range, Seed

Device = Annotated[
    str,
    Check(lambda v: isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", v), "auto, cpu, cuda or cuda:<index>"),
]
Compile = Annotated[
    Any,
    Check(
        lambda v: isinstance(v, (bool, dict)) or v == "blocks",
        "true, false, blocks (each block compiled on its own) or a mapping of torch.compile options",
    ),
]
Every = Annotated[
    Any,
    Check(lambda v: v is None or parse_every(v) is not None, "a step count >= 1 or a duration (30min, 2h, 90s)", 500),
]
TimeLimit = Annotated[
    Any, Check(lambda v: v is None or is_time_limit(v), "auto or a duration (3h55min, 30min, 04:00:00)", "3h55min")
]
Size = Annotated[Any, Check(lambda v: isinstance(v, str) or isinstance(v, int) and v >= 1, "a size like 64MB", "64MB")]


@dataclass
class Objective:
    metric: str = "val/loss"  # what picks the best checkpoint, early-stops and ranks sweeps
    mode: Literal["min", "max"] = "min"


@dataclass
class Paths:
    data_dir: str = "data"
    log_dir: str = "logs"
    min_free_mb: Annotated[float, Range(ge=0)] = 200
    output_dir: str | None = None


@dataclass
class Tune:
    """Lightning's finders before training (litforge.jobs.tuning); which keys apply depends on `finder`."""

    finder: Literal["none", "lr_find", "batch_size"] = "none"
    apply: bool = True
    min_lr: Positive = 1e-6
    max_lr: Positive = 1.0
    num_training: Annotated[int, Range(ge=13, example=100)] = 100  # the suggestion skips the first 10 and the last
    mode: Literal["exponential", "linear", "power", "binsearch"] = "exponential"
    early_stop_threshold: Annotated[float | None, Range(gt=1, example=4.0)] = 4.0
    init_val: Count = 2
    max_trials: Count = 25
    steps_per_trial: Count = 3
    max_val: Count = 8192


@dataclass
class Calibration:
    size: Count = 512
    batch_size: Count = 64


@dataclass
class Parity:
    atol: Annotated[float, Range(ge=0, example=1e-4)] = 1e-4
    min_agreement: Annotated[float, Range(ge=0, le=1)] = 0.999


@dataclass
class Report:
    batch_sizes: Annotated[list[Count], Range(min_items=1, example=[1, 64])] = field(default_factory=lambda: [1, 64])
    threads: list[int | Literal["all"]] = field(default_factory=lambda: [1, "all"])
    rounds: Count = 15
    max_acc_drop: Annotated[float, Range(ge=0)] = 0.01


@dataclass
class JobSettings:
    # every job
    task_name: str = "train"
    seed: Seed = 42
    print_config: bool = False
    ckpt_path: str | None = None
    trusted_packages: list[str] = field(default_factory=list)  # eval, predict, export, generate: see checkpointing.load
    paths: Paths | None = None
    # train
    resume: str | None = None  # auto | <run folder> | <file.ckpt>
    test_after_training: bool = True
    compile: Compile = False
    channels_last: bool = False
    activation_checkpointing: Literal["none", "full", "selective"] = "none"
    float8: Literal["none", "tensorwise", "rowwise"] = "none"  # litforge.models.float8
    dry_run: bool = False  # plan one step on fake ranks and print bytes per rank (litforge.parallel.dry_run)
    matmul_precision: Literal["highest", "high", "medium"] = "high"
    steps_per_call: Annotated[int, Range(ge=1, example=4)] | Literal["auto"] = 1
    checkpoint_every: Every = None
    checkpoint_async: bool = False
    time_limit: TimeLimit = "auto"
    objective: Objective | None = None
    tune: Tune | None = None
    # predict
    input: str | None = None
    output: str | None = None  # also prepare's (a folder or object-store URL)
    batch_size: Annotated[int, Range(ge=1, example=256)] = 256
    device: Device = "auto"  # also generate's
    # generate
    prompt: str = ""
    max_new_tokens: Count = 500
    temperature: Annotated[float, Range(gt=0, example=0.8)] = 0.8
    top_k: Annotated[int | None, Range(ge=1, example=10)] = None
    num_samples: Count = 1
    # export
    formats: list[str] = field(default_factory=lambda: ["onnx"])  # which: litforge.jobs.export
    input_dtype: Literal["uint8", "float32"] = "uint8"
    opset: Annotated[int | None, Range(ge=7, example=20)] = None
    quantize: list[str] = field(default_factory=list)
    calibration: Calibration | None = None
    parity: Parity | None = None
    report: Report | None = None
    # prepare (LitData shards)
    overwrite: bool = False
    chunk_bytes: Size = "64MB"
    num_workers: Count = 1
    start_method: Literal["fork", "spawn", "forkserver"] | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
