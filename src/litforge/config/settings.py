"""What each job reads from the top of its config (not a group's `_target_`): one pydantic model per job.

A key has one meaning in every job that reads it. Each default lives in one place, the YAML files of conf/ (the job's
top config, a group's option file): these models declare types and bounds only, so a field is required and the YAML
and the model cannot disagree (tests/test_validation.py). The config check (litforge.config.check) judges the top
level against :class:`JobSettings`, every job's keys, as it judges a group against its class's signature; each job
then reads its own model, typed, through :func:`settings`. Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from annotated_types import Predicate
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from litforge.core.bounds import Count, NonNegative, Positive, Seed
from litforge.core.errors import ConfigError
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

QUANTIZATIONS = ("torchao_dynamic", "onnx_dynamic", "onnx_static")  # quantize=[...] (litforge.deploy.quantize)


class Section(BaseModel):
    """A mapping of settings under one key (`paths`, `tune`, ...): its keys are fixed."""

    model_config = ConfigDict(strict=True, extra="forbid")


class Objective(Section):
    metric: str  # what picks the best checkpoint, early-stops and ranks sweeps
    mode: Literal["min", "max"]


class Paths(Section):
    data_dir: str
    log_dir: str
    min_free_mb: NonNegative
    output_dir: str


class Tune(Section):  # Lightning's finders before training (litforge.jobs.tuning); which keys apply depends on finder
    finder: Literal["none", "lr_find", "batch_size"]
    # a finder's own keys: set by its option file (conf/tune/<finder>.yaml), None where the finder takes no such key
    apply: bool | None = None
    min_lr: Positive | None = None
    max_lr: Positive | None = None
    num_training: Annotated[int, Field(ge=13, examples=[100])] | None = None  # the suggestion skips 10 + the last
    mode: Literal["exponential", "linear", "power", "binsearch"] | None = None
    early_stop_threshold: Annotated[float, Field(gt=1, examples=[4.0])] | None = None
    init_val: Count | None = None
    max_trials: Count | None = None
    steps_per_trial: Count | None = None
    max_val: Count | None = None


class Calibration(Section):
    size: Count
    batch_size: Count


class Parity(Section):
    atol: Annotated[float, Field(ge=0, examples=[1e-4])]
    min_agreement: Annotated[float, Field(ge=0, le=1)]


class Report(Section):
    batch_sizes: Annotated[list[Count], Field(min_length=1, examples=[[1, 64]])]
    threads: list[int | Literal["all"]]
    rounds: Count
    max_acc_drop: NonNegative


class Job(Section):  # every job's keys
    model_config = ConfigDict(strict=True, extra="ignore")  # the groups sit beside these keys
    task_name: str
    seed: Seed
    threads: Count | Literal["auto"]  # CPU threads per process (litforge.runtime.devices.apply_threads)
    print_config: bool
    paths: Paths


class Inference(Job):  # eval's keys, and every job's that reads a checkpoint
    ckpt_path: str | None
    trusted_packages: list[str]  # see litforge.checkpointing.load


class Train(Job):
    ckpt_path: str | None
    resume: str | None  # auto | <run folder> | <file.ckpt>
    test_after_training: bool
    tags: Annotated[list[str | int], Field(description="a list of labels", examples=[["mnist", "baseline"]])]
    compile: Compile
    channels_last: bool
    activation_checkpointing: Literal["none", "full", "selective"]
    float8: Literal["none", "tensorwise", "rowwise"]  # litforge.models.float8
    dry_run: bool  # plan one step on fake ranks and print bytes per rank (litforge.parallel.dry_run)
    dry_run_gpu: str  # its per-rank budget: a GPU of litforge.runtime.flops.GPU_MEMORY_GIB (checked there)
    dry_run_memory_gib: Annotated[float, Field(gt=0, le=4096, examples=[40])] | None  # else dry_run_gpu's
    matmul_precision: Literal["highest", "high", "medium"]
    steps_per_call: Annotated[int, Field(ge=1, examples=[4])] | Literal["auto"]
    checkpoint_every: Every
    checkpoint_async: bool
    time_limit: TimeLimit
    objective: Objective
    tune: Tune


class Predict(Inference):
    input: str | None
    output: str | None
    batch_size: Annotated[int, Field(ge=1, examples=[256])]
    device: Device


class Export(Inference):
    formats: list[str]  # which: litforge.jobs.export
    input_dtype: Literal["uint8", "float32"]
    opset: Annotated[int, Field(ge=7, examples=[20])] | None
    quantize: list[str]
    calibration: Calibration
    parity: Parity
    report: Report


class Generate(Inference):
    prompt: str
    max_new_tokens: Count
    temperature: Annotated[float, Field(gt=0, examples=[0.8])]
    top_k: Annotated[int, Field(ge=1, examples=[10])] | None
    num_samples: Count
    device: Device


class Prepare(Job):  # LitData shards
    output: str | None  # a folder or object-store URL (required: ??? in conf/prepare.yaml)
    overwrite: bool
    chunk_bytes: Annotated[str | Count, Field(description="a size like 64MB", examples=["64MB"])]
    num_workers: Count
    start_method: Literal["fork", "spawn", "forkserver"] | None
    storage_options: dict[str, Any]


class JobSettings(Train, Predict, Export, Generate, Prepare):
    """Every job's keys, one meaning each: what the config check binds the top level against."""


JOBS: dict[str, type[Job]] = {"train": Train, "eval": Inference, "predict": Predict, "export": Export}
JOBS |= {"generate": Generate, "prepare": Prepare}
S = TypeVar("S", bound=Job)


def job_settings(cfg: DictConfig, model: type[S]) -> S:
    """The job's own keys of a composed config, typed and validated (once, where the job starts, after the check):
    what the job, its builders and callbacks read instead of the raw config."""
    own = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in model.model_fields if k in cfg]), resolve=True)
    try:
        return model.model_validate(own)
    except ValidationError as exc:  # past the check: a key left out of a top config of the user's own
        error = exc.errors()[0]
        key, job = ".".join(map(str, error["loc"])), next(n for n, m in JOBS.items() if m is model)
        if error["type"] != "missing":
            raise ConfigError(f"{key}={error.get('input')!r}: {error['msg']}") from None
        raise ConfigError(
            f"{key} is not set, and {job} reads it: set it in your top config, or compose that from litforge's "
            f"(defaults: [{job}]), which sets every key"
        ) from None
