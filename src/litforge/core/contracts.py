"""The contracts between litforge's parts, as `typing.Protocol`s: what a datamodule, task, model or callback must
offer for the training job (and eval, predict, export) to put it together. docs/extending.md shows each in use.

Structural, not nominal: nothing has to inherit from these (litforge's own classes do not); a class that has the
members fits. The runtime-checkable ones are what the jobs and loop helpers test with `isinstance` before they rely
on a member, so a missing one is refused in one line instead of failing deep inside a run;
tests/test_contracts.py checks every option in conf/data, conf/task and conf/model against them.

Kept free of imports (torch, Lightning) at run time: anything may import it, at no cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor, nn

#: What `describe()` returns for litforge's own data kinds: the keyword arguments the tasks of that kind take.
#: A new kind brings its own facts (docs/extending.md adds "tabular" with `num_features`).
SHAPE_FACTS: dict[str, tuple[str, ...]] = {
    "image": ("input_shape", "num_classes", "class_names"),
    "text": ("vocab_size", "block_size", "vocab", "unigram_loss", "packed"),
    "rl": ("observation_size", "num_actions"),
    "features": ("input_shape", "feature_names"),  # plus num_classes/class_names or num_targets/target_names/...
}


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
    """A training loader whose position travels in checkpoints (litforge.data.loader.InMemoryLoader).

    Lightning saves `state_dict()` of a stateful training loader in every checkpoint and hands it back through
    `load_state_dict()` on resume, so a run resumed mid-epoch sees exactly the batches the interrupted one had not
    seen yet. A plain `DataLoader` (text, RL, streamed image folders) restarts its epoch instead; Lightning warns.
    The state is plain data, like everything else in a checkpoint.
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Task(Protocol):
    """A `LightningModule` (usually a subclass of `litforge.tasks.base.LitforgeTask`) that builds everything it
    trains from plain-data configs.

    Its constructor takes the configs (`net`, `optimizer`, `scheduler`, `loss`, the `task.*` keys) and the data's
    shape facts as keyword arguments, and stores them with `save_hyperparameters()`. Hyperparameters are plain data
    (dicts of `_target_` configs, numbers, strings, lists), never modules or partials, because checkpoints load under
    torch's `weights_only=True`; eval, predict and export then rebuild the task as `cls(**hparams)` from the checkpoint
    alone. The net is made with `litforge.models.factory.build_net(net, **shape keywords)` (its errors name the
    config) and the loss from the `loss=` config (`litforge.tasks.base.build_loss`).
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


def steps_through_step_loss(training_step: Any) -> Any:
    """Mark a `training_step` that is only `step_loss(batch)` plus logging, so loop helpers may drive `step_loss`
    themselves in its place (litforge's base task marks its own)."""
    training_step.steps_through_step_loss = True
    return training_step


def own_training_step(task: Any) -> str | None:
    """The class that gives `task` a `training_step` of its own (one not marked by :func:`steps_through_step_loss`),
    or None. A loop that replaces `training_step` by calls to `step_loss` would silently skip that code, so it
    refuses such a task instead."""
    method = getattr(type(task), "training_step", None)
    if method is None or getattr(method, "steps_through_step_loss", False):
        return None
    owner = next((c for c in type(task).__mro__ if "training_step" in vars(c)), type(task))
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


def trains_on(task: Any) -> tuple[str, ...]:
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
