"""The contracts between litforge's parts, as `typing.Protocol`s: what a datamodule, task, model or callback must
offer for the training job (and eval, predict, export) to put it together. docs/extending.md shows each in use.

Structural, not nominal: nothing has to inherit from these (litforge's own classes do not); a class that has the
members fits. The runtime-checkable ones are what the jobs and loop helpers test with `isinstance` before they rely
on a member, so a missing one is refused in one line instead of failing deep inside a run;
tests/test_contracts.py checks every option in conf/data, conf/task and conf/model against them.

Kept free of imports (torch, Lightning) at run time: anything may import it, at no cost. docs/api.md is the
reference of every contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from litforge.core.errors import ConfigError

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from torch import Tensor, nn

#: What `describe()` returns for litforge's own data kinds: the keyword arguments the tasks of that kind take.
#: A new kind brings its own facts (docs/extending.md adds "tabular" with `num_features`).
SHAPE_FACTS: dict[str, tuple[str, ...]] = {
    "image": ("input_shape", "num_classes", "class_names"),
    "text": ("vocab_size", "block_size", "vocab", "unigram_loss", "packed"),
    "rl": ("observation_size", "num_actions"),
    "features": ("input_shape", "feature_names"),  # plus num_classes/class_names or num_targets/target_names/...
    "tokens": ("vocab_size", "max_length", "num_classes", "class_names", "multilabel"),  # labelled texts (data=text)
}
StepMethod = TypeVar("StepMethod", bound=Callable[..., object])  # a task's training_step, marked as it is


@runtime_checkable
class DataModule(Protocol):
    """A `LightningDataModule` that knows its data family and its shape as soon as it is constructed.

    The training job builds it first, checks it against the task (`kind`), then builds the task from
    `describe()`: the net is sized by the data, so no net config repeats a number the data already knows, and a wrong
    `model=` × `data=` pair fails before any step runs.
    """

    #: The data family (`image`, `text`, `rl`, or a new one): a task trains only on its own `data_kind`, and the
    #: training job refuses a mismatched pair in one line before the task is built.
    kind: str

    #: Samples per training batch. steps_per_call cuts its grouped batches back into steps of this size, and the
    #: DQN task fills its replay buffer to at least one batch before learning.
    batch_size: int

    def describe(self) -> dict[str, Any]:
        """The shape facts the task takes as constructor keyword arguments (`SHAPE_FACTS` for litforge's kinds).

        Plain data (numbers, strings, lists), because the task saves them as hyperparameters and checkpoints load
        with `weights_only=True`. Available right after construction: reading what the facts need (the text, for a
        vocabulary) is done in `__init__`, the bulk of the data in `setup`.
        """
        ...


@runtime_checkable
class StatefulLoader(Protocol):
    """A training loader whose position travels in checkpoints (litforge.data.memory.InMemoryLoader).

    Lightning saves `state_dict()` of a stateful training loader in every checkpoint and hands it back through
    `load_state_dict()` on resume, so a run resumed mid-epoch sees exactly the batches the interrupted one had not
    seen yet. A plain `DataLoader` (text, RL, streamed image folders) restarts its epoch instead; Lightning warns.
    The state is plain data, like everything else in a checkpoint.
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Task(Protocol):
    """A `LightningModule` (usually a subclass of `litforge.tasks.task.LitforgeTask`) that builds everything it
    trains from plain-data configs.

    Its constructor takes the configs (`net`, `optimizer`, `scheduler`, `loss`, the `task.*` keys) and the data's
    shape facts as keyword arguments, and stores them with `save_hyperparameters()`. Hyperparameters are plain data
    (dicts of `_target_` configs, numbers, strings, lists), never modules or partials, because checkpoints load under
    torch's `weights_only=True`; eval, predict and export then rebuild the task as `cls(**hparams)` from the checkpoint
    alone. The net is made with `litforge.models.nets.build_net(net, **shape keywords)` (its errors name the
    config) and the loss from the `loss=` config (`litforge.tasks.task.build_loss`).
    """

    #: The `DataModule.kind`s it trains on (one, or a tuple: classification takes `image` and `features`); a class
    #: attribute, so the job checks it before building anything (:func:`trains_on`).
    data_kind: str | tuple[str, ...]

    #: The constructor's arguments as saved by `save_hyperparameters()`: what a checkpoint rebuilds the task from.
    hparams: Mapping[str, Any]

    def training_step(self, batch: Any, batch_idx: int) -> Any: ...


@runtime_checkable
class SteppableTask(Task, Protocol):
    """A task whose training is one optimizer step per batch, so loop helpers may drive its steps themselves.

    LitforgeTask's `training_step` is `step_loss(batch)` plus logging; steps_per_call (and pipeline schedules) call
    `step_loss` directly, several times per Lightning step. A task that cannot be stepped that way (DQN acts in its
    environment before each step) overrides `training_step`, defines no `step_loss`, and those helpers refuse it.
    """

    def step_loss(self, batch: Any) -> Tensor:
        """The loss of one optimizer step on `batch`; it may update training metrics, and its caller logs it."""
        ...


@runtime_checkable
class LoopSteppedTask(Protocol):
    """A task whose training steps a loop helper runs (steps_per_call, strategy=pipeline): the helper calls its
    `step_loss` (:class:`SteppableTask`) per optimizer step, steps the optimizer and its schedulers, and the task
    logs the step's losses. LitforgeTask has these. (No `training_step` here: the helper runs in its place, and a
    LightningModule's own `(*args, **kwargs)` one would not fit :class:`Task`'s, so the two could not be combined.)"""

    def step_loss(self, batch: Any) -> Tensor: ...

    @property
    def scheduler_cfg(self) -> Mapping[str, Any] | None:
        """The `scheduler=` config, or None: its `monitor` names ReduceLROnPlateau's metric."""
        ...

    def step_position(self, batch_idx: int) -> tuple[int, int, int]:
        """(global step, epoch, batch index) before this training step's first optimizer step."""
        ...

    def log_training_loss(self, loss: Tensor, batch: object, where: tuple[int, int, int]) -> None:
        """Log `train/loss` of a training step (`loss`: one per optimizer step, or the step's mean)."""
        ...


def steps_through_step_loss(training_step: StepMethod) -> StepMethod:
    """Mark a `training_step` that is only `step_loss(batch)` plus logging, so loop helpers may drive `step_loss`
    themselves in its place (litforge's base task marks its own)."""
    vars(training_step)["steps_through_step_loss"] = True  # a function attribute, read by own_training_step
    return training_step


def own_training_step(task: object) -> str | None:
    """The class that gives `task` a `training_step` of its own (one not marked by :func:`steps_through_step_loss`),
    or None. A loop that replaces `training_step` by calls to `step_loss` would silently skip that code, so it
    refuses such a task instead."""
    owner = next((c for c in type(task).__mro__ if "training_step" in vars(c)), None)
    if owner is None or getattr(vars(owner)["training_step"], "steps_through_step_loss", False):
        return None
    return f"{owner.__module__}.{owner.__qualname__}"


@runtime_checkable
class Model(Protocol):
    """A net: a plain `torch.nn.Module`, no Lightning, taking the shape keywords it needs in its constructor.

    Image nets take `in_channels`, `image_size` (H, W) and `num_classes`; text nets `vocab_size` and `block_size`;
    Q-networks `observation_size` and `num_actions`. Its own knobs (width, depth, dropout) come from its conf/model
    YAML. Its sharding facts live beside its definition (as torchtitan keeps a model's parallel plan beside the
    model), so litforge.parallel needs no rules keyed on class or parameter names.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any: ...

    def fsdp_units(self) -> list[nn.Module]:
        """Submodules that FSDP2 shards as one all-gather unit each (transformer blocks, residual stages, layers).

        Big enough to amortise the communication, small enough that only one unit's full weights exist at a time.
        A net without this is sharded as one unit under strategy=fsdp: it runs, but gathers all weights at once.
        """
        ...


@runtime_checkable
class TensorParallelModel(Model, Protocol):
    """A net that can be split across tensor-parallel ranks (strategy=tp, fsdp_tp); others are refused there."""

    def tensor_parallel_plan(self) -> dict[str, str]:
        """Dotted name of an `nn.Linear` → `colwise` | `rowwise` (Megatron-LM's split)."""
        ...

    def check_tensor_parallel(self, tp_size: int) -> None:
        """Raise ConfigError naming the model key when heads or widths do not divide by `tp_size`."""
        ...


@runtime_checkable
class PipelineModel(Model, Protocol):
    """A net that can be cut into consecutive pipeline stages (strategy=pipeline); others are refused there."""

    def pipeline_stages(self, num_stages: int) -> list[nn.Module]:
        """`num_stages` modules, sharing this net's submodules, whose composition in order is the net's forward
        (the first takes the net's input, the last returns its output); ConfigError naming the model key when
        the net is too shallow to fill them."""
        ...


@runtime_checkable
class ChecksTask(Protocol):
    """A strategy with refusals of its own that need the built task (hogwild: BatchNorm; pipeline: a cuttable net),
    asked once before any rank starts."""

    def check_task(self, task: pl.LightningModule) -> None: ...


@runtime_checkable
class ChecksRun(Protocol):
    """A strategy with refusals of its own that need the datamodule, the Trainer's arguments and the callbacks
    (pipeline: batch size, clipping), asked once before any rank starts; it may add callbacks of its own."""

    def check_run(
        self, datamodule: pl.LightningDataModule, trainer_kwargs: dict[str, Any], callbacks: list[pl.Callback]
    ) -> None: ...


@runtime_checkable
class Tracker(Protocol):
    """A logger that keeps a run of its own on a tracking server (litforge.records.tracking: MLflow, W&B): its run
    id goes into checkpoints under `tracker`, it logs the resolved run config as params and the run's files."""

    tracker: str
    run_config: Mapping[str, Any] | None

    def log_run_files(self, run_dir: Any, result: Mapping[str, Any], record: Mapping[str, Any]) -> None: ...


@runtime_checkable
class ConfiguresFsdp(Protocol):
    """A strategy with FSDP2 options of its own (strategy=fsdp|fsdp_tp: mixed precision, resharding), which the
    task's `configure_model` hands to `fully_shard`."""

    def fsdp_kwargs(self) -> dict[str, Any]: ...


@runtime_checkable
class MeetsRarely(Protocol):
    """A strategy whose ranks meet for a collective decision (a checkpoint by the clock, the NaN stop, SIGTERM)
    only every `decide_every` optimizer steps, the same steps on every rank (hogwild)."""

    decide_every: int


class Callback(Protocol):
    """A `pytorch_lightning.Callback` with one job, in its own file, configured by one conf/callbacks YAML.

    If it changes the model mid-run (pruning, QAT, unfreezing), it must say in its docstring how two things stay
    right, and do it:

    - best-checkpoint selection and early stopping: epochs before the change describe another model. Call
      `litforge.callbacks.selection.restart_selection(trainer, reason)` at the change when earlier scores must not
      compete (pruning at its final sparsity, QAT from its start epoch); unfreezing changes no function, so the
      scores stay comparable and it does not restart.
    - resume: what a resumed run needs to redo the change goes in `state_dict()` (pruning's masks), or is derived
      from the restored epoch (QAT re-prepares the fresh fp32 model), or is Lightning's (BackboneFinetuning saves
      its param groups).

    It logs through `pl_module.log` once per epoch, or only on the steps the loggers write: each call costs hundreds
    of Python calls, more than a small net's step.
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


# ---- what predict and export need (checked when those jobs start: check_predictable, check_exportable) ------------
#: The keys of what `predict_step` returns, as predict.py reads them: `predicted` (a class index per sample, or the
#: values of a regression, shape (N, ...)), and for classes optionally `confidence` (shape (N,)).
PREDICTION_KEYS: tuple[str, ...] = ("predicted", "confidence")


@runtime_checkable
class HasNet(Protocol):
    """A task that keeps its net as `net`: what sharding, pruning, QAT, transfer learning, FLOP counts and export
    work on (every litforge task; a user's task that keeps none is refused where a net is needed)."""

    net: nn.Module


def net_of(task: object) -> nn.Module | None:
    """The task's `net` (:class:`HasNet`), or None for a task that keeps none: where a net is optional.

    A module's submodules are asked for by name: from Python 3.12 `isinstance` against a runtime Protocol reads
    attributes statically (`inspect.getattr_static`), which does not see the submodules `nn.Module` keeps in
    `_modules`, so `isinstance(task, HasNet)` is False for every real task there."""
    from torch import nn  # contracts stays torch-free for the command line's checks; a net exists only past them

    if isinstance(task, nn.Module):
        try:
            return task.get_submodule("net")
        except AttributeError:
            return None
    return task.net if isinstance(task, HasNet) else None


@runtime_checkable
class DecidingTask(Protocol):
    """A task that declares which of its settings are decisions that may change after training (a classifier's
    `threshold`): eval, predict and export set them from their `task.*` keys (`task.threshold=0.3`).
    LitforgeTask has these members (no decisions unless a subclass names them)."""

    decisions: tuple[str, ...]

    def set_decisions(self, values: Mapping[str, Any], job: str) -> None:
        """Set each named decision (checked against the constructor's annotation); refuse any other name."""
        ...

    def decision_values(self) -> dict[str, Any]: ...


@runtime_checkable
class PredictTask(DecidingTask, Protocol):
    """A task predict.py runs: its own `predict_step` returns a mapping with `predicted` (and, for classes,
    `confidence`), one entry per sample: the CSV's columns.

    Lightning's default `predict_step` returns the bare forward output, so a task must define its own; litforge's
    ClassificationTask and RegressionTask do. The columns are named by `class_names` (a `class_name` column beside
    `predicted`; a negative `predicted` is no class, e.g. below `task.threshold`) and `target_names` (one column per
    predicted value); LitforgeTask declares both as None (numbered columns).
    """

    class_names: Sequence[str] | None
    target_names: Sequence[str] | None

    def predict_step(self, batch: Any, batch_idx: int) -> Mapping[str, Tensor]: ...


@runtime_checkable
class InputReader(Protocol):
    """A datamodule that reads new inputs from a file for `predict.py input=<file>` (data=csv reads a table)."""

    def read_inputs(self, path: str) -> tuple[list[str], Tensor]:
        """(a name per row, the rows as the task's `predict_step` takes them before `normalize`) from `path`."""
        ...


@runtime_checkable
class ImageInputs(Protocol):
    """An image datamodule whose new inputs are image files (`predict.py input=<image or folder>`): the files are
    decoded at `input_shape` (C, H, W) by the `decoder` training used (`torchvision` or `pil`), then normalised as
    in training. ImageDataModule has these members."""

    input_shape: Sequence[int]
    decoder: str

    def ensure_stats(self) -> None:
        """Make `normalize` usable: statistics from the config, the checkpoint, or else the training split."""
        ...

    def normalize(self, inputs: Tensor) -> Tensor: ...


@runtime_checkable
class ArraySplits(Protocol):
    """A datamodule that hands out a whole split as raw tensors: predict names the test rows by index (or by file,
    with `split_samples`), export measures parity and accuracy on them. Without it, predict and export read the
    datamodule's own `test_dataloader()` through its `on_after_batch_transfer`."""

    def split_arrays(self, split: str) -> tuple[Tensor, Tensor]:
        """(inputs before `normalize`, targets) of "train", "val" or "test"."""
        ...

    def normalize(self, inputs: Tensor) -> Tensor:
        """Raw inputs as the task trains on them (e.g. standardised)."""
        ...


@runtime_checkable
class FileSplits(Protocol):
    """A datamodule whose samples are files (image_folder): predict names each test row by its file."""

    def split_samples(self, split: str) -> list[tuple[str, int]]:
        """(file path, class index) of each sample of "train", "val" or "test", in `split_arrays` order."""
        ...


@runtime_checkable
class DatasetSplits(Protocol):
    """An image datamodule that reads its files as it goes (image_folder streaming): a split as a map-style dataset
    of (image, label), which prepare shards without decoding the whole split up front."""

    def split_dataset(self, split: str) -> Any: ...


@runtime_checkable
class StandardizedRows(ArraySplits, Protocol):
    """A datamodule of encoded table rows standardised by training statistics (data=csv, TabularDataModule):
    export takes the raw encoded rows and standardises them inside the graph; the metadata names the columns."""

    feature_names: Sequence[str]
    encoding: list[dict[str, Any]]

    def standardization(self) -> tuple[list[float], list[float]]:
        """(mean, std) per encoded column, of the training split."""
        ...


@runtime_checkable
class ExportTask(HasNet, DecidingTask, Protocol):
    """A task export.py deploys: its `net`, a plain `nn.Module` from the task's input to its output, or what
    `deployable_net()` returns where the deployed module differs from the trained one (regression adds its target
    scale; LitforgeTask's returns `net`). Only tasks of a fixed input shape export (not `text`, `rl`). The names
    go into the exported file's metadata (LitforgeTask declares them as None: numbered)."""

    hparams: Mapping[str, Any]
    class_names: Sequence[str] | None
    target_names: Sequence[str] | None
    feature_names: Sequence[str] | None

    def deployable_net(self) -> nn.Module: ...


@runtime_checkable
class ImageExportData(ArraySplits, Protocol):
    """What export needs of an `image` datamodule: the splits as tensors, its `class_names` (the ONNX metadata) and
    its normalisation statistics in `state_dict()` (`mean`, `std`), which the exported graph applies itself."""

    class_names: Sequence[str]

    def state_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class WritesPredictions(Protocol):
    """A task that owns the rows predict writes for it, whatever its output's shape (a class, a set of labels,
    values): predict.py holds no task-specific columns. LitforgeTask's defaults write a class (`predicted`,
    `class_name`, `confidence`) or one column per value; a multi-label task writes `labels=billing;bug` and one
    probability column per label. Checked when predict starts (a task without both members is refused in one line)
    and on the first batch (a wrong return type is refused in one line)."""

    def prediction_rows(self, out: Mapping[str, Tensor]) -> list[dict[str, str | int | float]]:
        """One row per sample of what `predict_step` returned for a batch, in order: column name -> value (a string,
        an int or a float; every row of a run with the same columns)."""
        ...

    def answer_columns(self, target: Tensor) -> dict[str, str | int | float]:
        """The known answer of one test-split sample, written beside its prediction. predict's summary compares
        each answer column `true_<name>` with the row's `<name>` (and `label` with `predicted`): floats by mean
        absolute error (`mae`), anything else by exact agreement (`accuracy`)."""
        ...


@dataclass(frozen=True)
class ExampleInput:
    """One input of the deployed model, as export traces and checks it."""

    name: str  # the ONNX graph's input name
    example: Tensor  # a small batch (2 or more) of real inputs, in the dtype the graph takes (int64 token ids, ...)
    dynamic_axes: Mapping[int, str]  # the axes that vary between calls: {0: "batch", 1: "length"}; one name, one size


@runtime_checkable
class DeclaresInputs(Protocol):
    """A datamodule that declares what its deployed model takes and what a deployer must know: export traces the
    net on `example_inputs()` (names, dtypes, dynamic axes: a text model takes int64 token ids of any length) and
    writes `deployment_facts()` into the model's metadata (label names, the tokenizer). The net is called with the
    inputs in the declared order; export's parity check runs onnxruntime on the examples as given and again cut to
    half of every dynamic axis but the batch (a second length), against the net."""

    def example_inputs(self) -> list[ExampleInput]:
        """The deployed graph's inputs, in the order the net's `forward` takes them (litforge.ExampleInput)."""
        ...

    def deployment_facts(self) -> dict[str, str]:
        """Metadata a deployer needs to build the inputs and read the outputs: key -> string (JSON for lists)."""
        ...


@runtime_checkable
class ComparesOutputs(Protocol):
    """A task that judges an exported model's outputs in its own terms: export's parity line and the report's
    accuracy come from here (a classifier: argmax agreement; multi-label: per-label decisions at the task's
    threshold, and the largest probability difference)."""

    def compare_outputs(self, reference: Tensor, exported: Tensor) -> dict[str, float]:
        """Figures of `exported` against `reference` (the deployed net's outputs on the same inputs): `agreement`,
        the share in [0, 1] of samples whose decisions agree, and `max_abs_diff`, on the net's output scale; export
        enforces `parity.min_agreement` and `parity.atol` on them. LitforgeTask's default: argmax agreement."""
        ...


@runtime_checkable
class GenerateTask(Protocol):
    """A task generate.py samples text from (task=language_model)."""

    def generate_text(
        self,
        prompt: str = "",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> str:
        """A continuation of `prompt`, sampled at `temperature` from the `top_k` likeliest tokens, seeded."""
        ...


def lacks(members: list[str]) -> str:
    return ", ".join(f"`{m}`" for m in members)


def defines_own(obj: object, name: str) -> bool:
    """Whether `obj` (a class, or an instance of it) or a base outside Lightning defines `name`: Lightning's base
    classes define defaults (`predict_step`, `test_dataloader`) that do not fulfil litforge's contracts."""
    cls = obj if isinstance(obj, type) else type(obj)
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    return owner is not None and not owner.__module__.startswith(("pytorch_lightning.", "lightning."))


#: What a task writing predict's rows offers (:class:`WritesPredictions`), as a refusal shows it.
ROWS_SIGNATURE = (
    "`prediction_rows(out: Mapping[str, Tensor]) -> list[dict[str, str | int | float]]` (one row per sample) and "
    "`answer_columns(target: Tensor) -> dict[str, str | int | float]`"
)


def check_predict_task(task: object, where: str) -> None:
    """The task half of :func:`check_predictable`, on the task or its class alone: a check before the job starts
    (the checkpoint's recorded class) can refuse a task before anything is built. A task without a `predict_step`
    of its own is predicted through its forward (the job warns), but for one that generates text and litforge's own
    (which have no such old shape)."""
    cls = task if isinstance(task, type) else type(task)
    if not defines_own(task, "predict_step") and defines_own(task, "generate_text"):
        raise writes_text(cls.__name__, where)
    if not defines_own(task, "predict_step") and cls.__module__.startswith("litforge."):  # none of the old shape
        raise no_predict_step(cls.__name__, where)
    if missing := [m for m in ("prediction_rows", "answer_columns") if not defines_own(task, m)]:
        raise lacks_rows(cls.__name__, missing, where)


def no_predict_step(name: str, where: str) -> ConfigError:
    """The refusal of litforge's own task `name` without a `predict_step` (DQN: it acts in its environment)."""
    return ConfigError(
        f"{where}: task `{name}` lacks `predict_step`: it has no outputs predict could write; evaluate it with "
        "`litforge eval ckpt_path=<this checkpoint>`"
    )


def writes_text(name: str, where: str) -> ConfigError:
    """The refusal of a task that generates text (:class:`GenerateTask`) and has no `predict_step` of its own."""
    return ConfigError(
        f"{where}: task `{name}` generates text, which predict (rows of a CSV) does not write: sample it with "
        "`litforge generate ckpt_path=<this checkpoint> prompt=<text> num_samples=<n>`"
    )


def lacks_rows(name: str, missing: list[str], where: str) -> ConfigError:
    """The refusal of task class `name` without the members of :class:`WritesPredictions` (also judged from its
    source before the job starts: litforge.checkpointing.metadata.check_predict_source)."""
    return ConfigError(
        f"{where}: task `{name}` lacks {lacks(missing)}: predict writes the rows the task declares: "
        f"{ROWS_SIGNATURE} (litforge.WritesPredictions; LitforgeTask has both)"
    )


def check_predictable(task: object, datamodule: object, input_path: str | None, where: str) -> None:
    """Refuse in one line, before predict.py does any work, a task or datamodule without what it needs
    (:class:`PredictTask`; for `input=`, :class:`InputReader` or :class:`ImageInputs`; for the test split,
    :class:`ArraySplits` or a `test_dataloader` of its own). `where`: the `key=value` the line starts with."""
    data_name = type(datamodule).__name__
    check_predict_task(task, where)
    if input_path:
        if isinstance(datamodule, InputReader) or isinstance(datamodule, ImageInputs):
            return
        missing = missing_members(datamodule, ImageInputs)
        raise ConfigError(
            f"input={input_path}: data `{data_name}` lacks `read_inputs` (and {lacks(missing)} for image files): "
            "give it `read_inputs(path) -> (names, inputs)` (litforge.InputReader), or predict its test split "
            "without input="
        )
    if not isinstance(datamodule, ArraySplits) and not defines_own(datamodule, "test_dataloader"):
        raise ConfigError(
            f"{where}: data `{data_name}` lacks `test_dataloader` (and `split_arrays`): predict without input= reads "
            "the test split; give the datamodule a `test_dataloader()` (litforge.SplitDataModule has one), or pass "
            "input=<file>"
        )


def no_predicted(name: str, got: str, where: str) -> ConfigError:
    """The refusal of a `predict_step` output that LitforgeTask's default rows cannot read (no `predicted`)."""
    return ConfigError(
        f"{where}: `{name}.predict_step` returned {got}, without `predicted`: return "
        "{'predicted': ..., 'confidence': ... (optional)}, one entry per sample (litforge.PredictTask), or write "
        f"the rows yourself: {ROWS_SIGNATURE}"
    )


def check_rows(task: object, member: str, rows: object, count: int | None, where: str) -> None:
    """What `prediction_rows` (a list of `count` rows) or `answer_columns` (one row, `count` None) returned for the
    first batch: rows of column name -> str | int | float, else one line showing the signature."""
    many, cells = count is not None, (str, int, float)
    listed = rows if many and isinstance(rows, list) else [rows]
    bad = [r for r in listed if not isinstance(r, dict) or not all(isinstance(v, cells) for v in r.values())]
    if many and not isinstance(rows, list):
        got = f"a {type(rows).__name__}, not a list"
    elif bad or len(listed) != (count if many else 1):
        got = f"a row {str(bad[0])[:60]!r}" if bad else f"{len(listed)} rows for {count} samples"
    else:
        return
    raise ConfigError(
        f"{where}: `{type(task).__name__}.{member}` returned {got}: it returns column name -> str | int | float"
        f"{' per sample' if many else ''}: {ROWS_SIGNATURE} (litforge.WritesPredictions)"
    )


def check_exportable(task: object, datamodule: object, where: str) -> None:
    """Refuse in one line, before export.py does any work, a task or datamodule without what it needs
    (:class:`ExportTask`; data that declares its inputs (:class:`DeclaresInputs`), or else serves its test split
    (:class:`ArraySplits`, :class:`ImageExportData`, or a `test_dataloader` of its own) for the parity check)."""
    if missing := missing_members(task, ExportTask):
        raise ConfigError(
            f"{where}: task `{type(task).__name__}` lacks {lacks(missing)}: export deploys the task's `net` (an "
            "nn.Module from its input to its output), or what its `deployable_net()` returns (litforge.ExportTask)"
        )
    if not isinstance(datamodule, (DeclaresInputs, ArraySplits)) and not defines_own(datamodule, "test_dataloader"):
        raise ConfigError(
            f"{where}: data `{type(datamodule).__name__}` lacks `example_inputs` (and `test_dataloader`): export "
            "traces the net on the inputs the datamodule declares (litforge.DeclaresInputs), else on its test "
            "split's; give the datamodule `example_inputs()` and `deployment_facts()`"
        )


def check_evaluable(task: object, datamodule: object, where: str) -> None:
    """Refuse in one line, before eval.py tests anything, a task without a `test_step` of its own or a datamodule
    without a `test_dataloader` of its own (Lightning's defaults raise deep inside `trainer.test`)."""
    for obj, role, member in ((task, "task", "test_step"), (datamodule, "data", "test_dataloader")):
        if not defines_own(obj, member):
            raise ConfigError(
                f"{where}: {role} `{type(obj).__name__}` lacks `{member}`: eval runs `trainer.test`, which calls the "
                "task's `test_step(batch, batch_idx)` on the datamodule's `test_dataloader()` (litforge's tasks and "
                "SplitDataModule have them)"
            )


def trains_on(task: object) -> tuple[str, ...]:
    """The data kinds a task class (or task) declares in `data_kind`: one name or a tuple of names; () if none."""
    kind = getattr(task, "data_kind", None)
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, tuple) and kind and all(isinstance(k, str) for k in kind):
        return kind
    return ()


def missing_members(obj: object, protocol: type) -> list[str]:
    """The members of `protocol` that `obj` lacks (empty when it fits): what a one-line refusal names."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base in (Protocol, object) or base.__module__ == "typing":
            continue
        names |= {name for name in vars(base) if not name.startswith("_")}
        names |= set(vars(base).get("__annotations__", {}))
    return sorted(name for name in names if not hasattr(obj, name))


def check_trainable(task_cls: type, datamodule: object) -> None:
    """Refuse, before any data is read, a task × data pair that cannot work: the task is built from the datamodule's
    `describe()` and trains only on its own `data_kind` (:func:`trains_on`)."""
    if not isinstance(datamodule, DataModule):
        missing = missing_members(datamodule, DataModule)
        raise ConfigError(
            f"data `{type(datamodule).__name__}` lacks {', '.join(f'`{m}`' for m in missing)}: a litforge datamodule "
            "states its `kind` (e.g. 'image'), its `batch_size` and its shape facts in `describe()` "
            "(litforge.core.contracts.DataModule; docs/extending.md adds one)"
        )
    kinds = trains_on(task_cls)
    if not kinds:
        raise ConfigError(
            f"task `{task_cls.__name__}` does not say which data it trains on: give it a class "
            "attribute `data_kind` (e.g. 'image', or a tuple of kinds), as litforge.tasks.task.LitforgeTask does"
        )
    if datamodule.kind not in kinds:
        raise ConfigError(
            f"task `{task_cls.__name__}` trains on {' or '.join(kinds)} data, but data "
            f"`{type(datamodule).__name__}` is {datamodule.kind} data: pick a matching pair (e.g. an experiment= "
            "recipe), see `python train.py --help`"
        )


@runtime_checkable
class DownloadsData(Protocol):
    """A datamodule whose `prepare_data` downloads its files: a sweep names each job that must, before its first job
    starts (litforge.cli.preflight.check_sweep), instead of the job failing offline halfway through the sweep."""

    def missing_download(self) -> str | None:
        """What must be downloaded and is not there yet (None: nothing): one line, naming the folder."""
        ...
