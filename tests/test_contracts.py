"""Every option of conf/data, conf/task and conf/model keeps its contract (litforge.core.contracts), checked by the
contract kit a user's project runs on its own options (litforge.testing): one kit, not two.

Built cheaply: datamodules that read files get tiny ones in their native format (torchvision's IDX and pickle
files, a class-per-folder image tree, a text file) and never download; nets are built at small shapes.

Which kit check runs on which options (suite time: the kit's checks fit a few CPU steps each):
- `check_describe_sizes_net`: every data option (with a cheap task and net of its kind) and every net option;
- `check_one_step_trains`, `check_checkpoint_round_trip`: every task option, and every net option;
- `check_predict_contract`, `check_export_contract`: the tasks predict and export serve (classification on images,
  regression on a table); the other tasks are refused by predict's contract check in one line;
- `check_resume_mid_epoch_exact`: one data option of each kind (digits, csv, python_docs, cartpole): every
  in-memory option shares digits' loader (litforge.InMemoryLoader), and the streamed loaders have their own
  resume tests (tests/test_data_resume.py);
- `check_ddp_matches_single_process` (2 spawned gloo ranks, ~15 s) and `check_all`: on one project option set,
  composed through `compose(config_dir=...)` as a user's tests compose theirs.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import get_class

from conftest import CONF, make_image_folder
from litforge.core.contracts import (
    SHAPE_FACTS,
    DataModule,
    Model,
    StatefulLoader,
    SteppableTask,
    Task,
    TensorParallelModel,
    missing_members,
)
from litforge.core.errors import ConfigError
from litforge.testing import (
    check_all,
    check_checkpoint_round_trip,
    check_describe_sizes_net,
    check_export_contract,
    check_one_step_trains,
    check_predict_contract,
    check_resume_mid_epoch_exact,
    compose,
)

# a cheap datamodule (and a net and loss that fit it) for each data kind a task in conf/task trains on
PARTNERS = {
    "image": ["data=digits", "model=mlp", "model.hidden_dims=[16]"],
    "text": [
        "data=python_docs",
        "data.max_chars=5000",
        "data.block_size=16",
        "model=gpt",
        "model.dim=16",
        "model.depth=1",
        "model.heads=2",
    ],
    "rl": [
        "data=cartpole",
        "data.buffer_size=256",
        "data.batch_size=8",
        "model=qnet",
        "model.hidden_dims=[16]",
        "loss=huber",
        "task.warmup_steps=16",
    ],
    "features": ["data=csv", "data.dataset=diabetes", "data.target_kind=value", "model=mlp", "model.hidden_dims=[16]"],
    "tokens": ["data=text", "model=text_pool", "model.dim=8", "model.hidden=8"],
}
# the shape keywords each kind's tasks hand to `build_net`, and an input batch of that shape
NET_SHAPES: dict[str, tuple[dict[str, Any], Any]] = {
    "image": ({"in_channels": 1, "image_size": (8, 8), "num_classes": 3}, lambda: torch.zeros(2, 1, 8, 8)),
    "text": ({"vocab_size": 11, "block_size": 16}, lambda: torch.randint(0, 11, (2, 16))),
    "rl": ({"observation_size": 4, "num_actions": 2}, lambda: torch.zeros(2, 4)),
    "features": ({"num_features": 5, "num_classes": 3}, lambda: torch.zeros(2, 5)),
    "tokens": ({"vocab_size": 11, "max_length": 16, "num_classes": 3}, lambda: torch.randint(1, 11, (2, 9))),
}
NET_OUTPUTS = {"image": (2, 3), "text": (2, 16, 11), "rl": (2, 2), "features": (2, 3), "tokens": (2, 3)}
# a cheap task and net for the kit's checks of a data option of each kind
KIND_TASKS = {
    "image": ["task=classification", "model=mlp", "model.hidden_dims=[16]"],
    "features": ["task=classification", "model=mlp", "model.hidden_dims=[16]"],
    "tokens": ["task=multilabel", "model=text_pool", "model.dim=8", "model.hidden=8"],
    "text": ["task=language_model", "model=gpt", "model.dim=16", "model.depth=1", "model.heads=2"],
    "rl": [
        "task=dqn",
        "model=qnet",
        "model.hidden_dims=[16]",
        "loss=huber",
        "task.warmup_steps=16",
        "data.batch_size=8",
    ],
}
# The tables above only make litforge's own kinds cheap to test. A kind they do not name (one a user adds inside the
# clone, with its datamodule, task and an experiment= recipe) is tested through the first experiment that uses it.


def options(group: str) -> list[str]:
    return [p.stem for p in sorted((CONF / group).glob("*.yaml"))]


def weights_only_roundtrip(value: Any) -> Any:
    """`value` saved and loaded back the way checkpoints are (torch.load with weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def task_kinds() -> set[str]:
    from omegaconf import OmegaConf

    from litforge.core.contracts import trains_on

    return {
        kind
        for name in options("task")
        for kind in trains_on(get_class(OmegaConf.load(CONF / "task" / f"{name}.yaml").task._target_))
    }


def partner(compose_cfg: Any, kinds: tuple[str, ...] | None, model_target: str | None = None) -> list[str]:
    """Overrides that give a task of `kinds` (or the net `model_target`) cheap data: litforge's own from PARTNERS,
    else the first experiment= recipe with data of one of those kinds (and that net)."""
    known = [k for k in kinds or () if k in PARTNERS]
    if known and model_target is None:
        return PARTNERS[known[0]]
    for name in options("experiment"):
        cfg = compose_cfg(f"experiment={name}")
        if (kinds is None or get_class(cfg.data._target_).kind in kinds) and model_target in (None, cfg.model._target_):
            return [f"experiment={name}"]
    raise AssertionError(f"no cheap partner and no experiment= recipe for {model_target or 'a task'} on {kinds} data")


# ---- files in the native formats of the datamodules that read them ------------------------------------------------
def data_overrides(option: str, tmp_path: Path, data_dir: Path) -> list[str]:
    """What option `option` needs to build here without a download: its files, written small, and small sizes."""
    from test_data_torchvision import write_cifar, write_mnist

    if option in ("mnist", "fashion_mnist"):
        write_mnist(data_dir, {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}[option])
        return ["data.download=false"]
    if option == "cifar10":
        write_cifar(data_dir)
        return ["data.download=false"]
    if option == "image_folder":
        return [f"data.root={make_image_folder(tmp_path / 'images')}"]
    if option == "text_file":
        (tmp_path / "corpus.txt").write_text("a small corpus of text, long enough for a few windows. " * 20)
        return [f"data.path={tmp_path / 'corpus.txt'}", "data.block_size=16"]
    if option == "python_docs":
        return ["data.max_chars=5000", "data.block_size=16"]
    if option == "cartpole":
        return ["data.buffer_size=256"]
    if option == "streaming":  # shards of a small digits subset, as `python prepare.py` writes them
        from litforge.data.digits import DigitsDataModule
        from litforge.data.streaming import write_shards

        write_shards(DigitsDataModule(classes=[0, 1, 2], train_per_class=20), str(tmp_path / "shards"))
        return [f"data.input_dir={tmp_path / 'shards'}", "data.batch_size=8"]
    return []


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every URL opened fails at once and is recorded, as on a machine without internet."""
    import urllib.error
    import urllib.request

    tried: list[str] = []

    def fail(request: Any, *args: Any, **kwargs: Any) -> Any:
        tried.append(getattr(request, "full_url", str(request)))
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    return tried


@pytest.fixture
def cifar_files_without_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-written CIFAR batches cannot match torchvision's md5 sums: keep only its file-exists check."""
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


# ---- DataModule -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", options("data"))
def test_every_datamodule_keeps_the_data_contract(
    option: str, compose_cfg, tmp_path: Path, no_network: list[str], cifar_files_without_md5: None
) -> None:
    from litforge.core.instantiate import instantiate_group

    data_dir = tmp_path / "data"
    overrides = [f"data={option}", *data_overrides(option, tmp_path, data_dir)]
    cfg = compose_cfg(*overrides)
    datamodule = instantiate_group("data", cfg.data)

    assert isinstance(datamodule, DataModule), missing_members(datamodule, DataModule)
    assert datamodule.kind in task_kinds(), f"no task in conf/task trains on {datamodule.kind} data"
    assert isinstance(datamodule.batch_size, int) and datamodule.batch_size >= 1
    facts = datamodule.describe()
    assert set(SHAPE_FACTS.get(datamodule.kind, ())) <= set(facts)

    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    if datamodule.kind in ("image", "features"):  # in-memory data: a mid-epoch resume continues at the exact batch
        assert isinstance(loader, StatefulLoader)
        next(iter(loader))
        state = loader.state_dict()
        done = state["num_samples_yielded"] // datamodule.batch_size if option == "streaming" else state["batches_done"]
        assert weights_only_roundtrip(state) == state and done == 1

    # the kit: describe() is plain data, and sizes a net of a task of this kind that takes the loader's batches
    check_describe_sizes_net(compose_cfg(*overrides, *KIND_TASKS[datamodule.kind]))
    assert no_network == [], "building and loading a datamodule must not download"


def test_the_training_job_refuses_a_datamodule_without_the_contract_in_one_line() -> None:
    from litforge.core.contracts import check_trainable
    from litforge.tasks.classification import ClassificationTask

    with pytest.raises(ConfigError) as refused:
        check_trainable(ClassificationTask, pl.LightningDataModule())
    message = str(refused.value)
    assert "\n" not in message
    assert "LightningDataModule` lacks `batch_size`, `describe`, `kind`" in message

    class NoKindTask(pl.LightningModule):
        pass

    from litforge.data.digits import DigitsDataModule

    with pytest.raises(ConfigError, match="`NoKindTask` does not say which data it trains on"):
        check_trainable(NoKindTask, DigitsDataModule())


# ---- Task -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", options("task"))
def test_every_task_keeps_the_task_contract(option: str, compose_cfg, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from litforge.core.contracts import check_trainable, trains_on
    from litforge.core.instantiate import instantiate_group
    from litforge.jobs.build import build_task, task_class
    from litforge.loops import steps_per_call
    from litforge.tasks.task import LitforgeTask

    kinds = trains_on(get_class(OmegaConf.load(CONF / "task" / f"{option}.yaml").task._target_))
    cfg = compose_cfg(*partner(compose_cfg, kinds), f"task={option}", "print_config=false")
    datamodule = instantiate_group("data", cfg.data)
    check_trainable(task_class(cfg), datamodule)
    task = build_task(cfg, datamodule.describe())

    assert isinstance(task, Task), missing_members(task, Task)
    assert trains_on(task) == kinds and datamodule.kind in kinds
    kind = datamodule.kind
    assert set(datamodule.describe()) <= set(task.hparams), "the shape facts are constructor arguments"
    hparams = dict(task.hparams)
    assert weights_only_roundtrip(hparams) == hparams  # plain data, so checkpoints load with weights_only=True
    assert isinstance(task.net, Model) and not isinstance(task.net, pl.LightningModule)

    # the kit: one step trains; a real checkpoint loads under weights_only and rebuilds the task alone
    check_one_step_trains(cfg)
    check_checkpoint_round_trip(cfg, tmp_path / "kit")

    if isinstance(task, SteppableTask):
        datamodule.setup("fit")
        batch = (
            datamodule.on_after_batch_transfer(next(iter(datamodule.train_dataloader())), 0)
            if kind in ("image", "features")
            else next(iter(datamodule.train_dataloader()))
        )
        loss = task.step_loss(batch)
        assert loss.ndim == 0 and loss.requires_grad and torch.isfinite(loss)
        steps_per_call.install(2, task, datamodule, {}, "auto", [])  # the loop helper accepts it
        assert task.automatic_optimization is False
    else:  # stepped in its own training_step (DQN acts first): the loop helpers refuse it in one line
        assert type(task).training_step is not LitforgeTask.training_step
        with pytest.raises(ConfigError, match="needs a task with a per-step loss"):
            steps_per_call.install(2, task, datamodule, {}, "auto", [])


# the tasks predict.py and export.py serve, each on cheap data of its kind
SERVED = {
    "classification": ["model=mlp", "model.hidden_dims=[16]"],
    "regression": ["task=regression", *PARTNERS["features"]],
}


@pytest.mark.parametrize("option", sorted(SERVED))
def test_the_tasks_predict_and_export_serve_keep_their_contracts(option: str, compose_cfg, tmp_path: Path) -> None:
    cfg = compose_cfg(*SERVED[option])
    check_predict_contract(cfg, tmp_path / "predict")
    check_export_contract(cfg, tmp_path / "export")


@pytest.mark.parametrize(("option", "says"), [("language_model", "generates text"), ("dqn", "lacks `predict_step`")])
def test_predict_refuses_the_tasks_it_cannot_write_in_one_line(option: str, says: str, compose_cfg, tmp_path) -> None:
    """A language model is pointed to `litforge generate`; DQN, which acts in its environment, to `litforge eval`."""
    kind = "text" if option == "language_model" else "rl"
    cfg = compose_cfg(*PARTNERS[kind], f"task={option}")
    with pytest.raises(AssertionError) as refused:
        check_predict_contract(cfg, tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("kind", sorted(PARTNERS))
def test_one_data_option_of_each_kind_resumes_mid_epoch_exactly(kind: str, compose_cfg, tmp_path: Path) -> None:
    """The kit's resume check on digits, csv, python_docs and cartpole (with a task of their kind)."""
    overrides = [*PARTNERS[kind], *KIND_TASKS[kind]] if kind != "features" else [*PARTNERS[kind], "task=regression"]
    check_resume_mid_epoch_exact(compose_cfg(*overrides), tmp_path)


PROJECT_NET = """\
# a project's own option beside litforge's: a small MLP without dropout
_target_: litforge.models.mlp.MLP
_partial_: true
hidden_dims: [12]
dropout: 0.0
"""


@pytest.mark.slow
@pytest.mark.distributed  # the DDP check spawns 2 gloo ranks
def test_the_whole_kit_on_a_project_option_composed_beside_litforges(tmp_path: Path) -> None:
    """compose(config_dir=...) puts the project's conf/ first and litforge's after it, as `litforge train` does in a
    project; check_all then runs every check on it, the DDP one included (the suite's only 2-rank kit run)."""
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "tiny_mlp.yaml").write_text(PROJECT_NET)
    cfg = compose(["model=tiny_mlp", "data.batch_size=16"], config_dir=conf)
    assert cfg.model.hidden_dims == [12] and cfg.optimizer._target_ == "torch.optim.AdamW"  # litforge's underneath
    check_all(cfg, tmp_path / "kit")
    broken = compose(["model=tiny_mlp", "model.hidden_dims=[]", "model._target_=torch.nn.Identity"], config_dir=conf)
    with pytest.raises(AssertionError) as refused:
        check_describe_sizes_net(broken)
    assert "\n" not in str(refused.value)


# ---- Model ----------------------------------------------------------------------------------------------------------
GPT_PRESETS = ("gpt2_124m", "gpt2_350m", "gpt_1b", "gpt_7b")


def test_a_net_configs_own_shape_keys_win_over_the_datas(compose_cfg) -> None:
    """A preset's vocab_size and block_size are kept (the factory fills only the shape keys a config lacks), and each
    preset picks the text task and data a GPT trains on."""
    from litforge.core.instantiate import to_plain
    from litforge.models.meta import meta_nets
    from litforge.models.nets import build_net

    for option in GPT_PRESETS:
        cfg = compose_cfg(f"model={option}")
        assert cfg.task._target_.endswith("LanguageModelTask") and cfg.data._target_.endswith("TextDataModule")
        with meta_nets(True):  # shapes only: the 7B preset's 26 GB are never allocated
            net = build_net(to_plain(cfg.model), vocab_size=11, block_size=16)
        assert net.head.out_features == 50304 and net.block_size == cfg.model.block_size >= 1024


@pytest.mark.parametrize("option", options("model"))
def test_every_net_keeps_the_model_contract(option: str, compose_cfg) -> None:
    from litforge.core.instantiate import to_plain
    from litforge.models.nets import build_net
    from litforge.parallel.plans import sharding_units, tensor_parallel_plan

    # the sized GPT presets (conf/model/gpt_7b.yaml, ...) are model=gpt at real sizes: checked here at a tiny one,
    # without the vocabulary and context they keep over the data's (test_a_net_configs_own_shape_keys_win)
    small = ["model.dim=32", "model.depth=2", "model.heads=4", "~model.vocab_size", "~model.block_size"]
    net_cfg = to_plain(compose_cfg(f"model={option}", *(small if option in GPT_PRESETS else [])).model)
    built = {}
    for kind, (shape, _) in NET_SHAPES.items():
        try:
            built[kind] = build_net(net_cfg, **shape)
        except ConfigError as exc:
            assert "cannot be built from" in str(exc)
    if not built:  # a net for a kind of the user's own: built by the task of the experiment that uses it
        from litforge.core.instantiate import instantiate_group
        from litforge.jobs.build import build_task

        cfg = compose_cfg(*partner(compose_cfg, None, net_cfg["_target_"]))
        datamodule = instantiate_group("data", cfg.data)
        net = build_task(cfg, datamodule.describe()).net
        datamodule.setup("fit")
        batch = datamodule.on_after_batch_transfer(next(iter(datamodule.train_dataloader())), 0)
        assert net(batch[0]).shape[0] == len(batch[0])
    for kind, net in built.items():
        assert net(NET_SHAPES[kind][1]()).shape == NET_OUTPUTS[kind]
    net = next(iter(built.values())) if built else net
    if built:  # the kit: sized by cheap data of its first kind, through a task of that kind, it trains a step
        kind = next(iter(built))
        data = [o for o in PARTNERS[kind] if not o.startswith("model")]
        task = [o for o in KIND_TASKS[kind] if not o.startswith("model")]
        sizes = small if option in GPT_PRESETS else ["model.depth=1"] if option == "gpt" else []
        kit_cfg = compose_cfg(*data, *task, f"model={option}", *sizes)
        check_describe_sizes_net(kit_cfg)
        check_one_step_trains(kit_cfg)

    assert isinstance(net, Model), missing_members(net, Model)
    assert isinstance(net, torch.nn.Module) and not isinstance(net, pl.LightningModule)
    units = net.fsdp_units()
    modules = {id(m) for m in net.modules()}
    assert units and all(id(unit) in modules and unit is not net for unit in units)
    assert sharding_units(net) == units, "every unit holds parameters"

    if isinstance(net, TensorParallelModel):
        plan = tensor_parallel_plan(net)  # names Linear submodules, with a known style each
        assert plan and set(plan.values()) <= {"colwise", "rowwise"}
        net.check_tensor_parallel(1)
        with pytest.raises(ConfigError):
            net.check_tensor_parallel(3)  # 4 heads do not split over 3 ranks
    else:
        with pytest.raises(ConfigError, match="tensor_parallel_plan"):
            tensor_parallel_plan(net)


# ---- the predict contract, checked when the job starts --------------------------------------------------------------
USER_TASK = '''\
"""A user's own task, trained and checkpointed like litforge's, without a predict_step."""
from torch import nn

from litforge import LitforgeTask, build_loss, build_net


class PlainTask(LitforgeTask):
    data_kind = ("image",)

    def __init__(self, net, optimizer, input_shape, num_classes, class_names=(), scheduler=None, loss=None,
                 run_config=None, lr_scaling="none", init_from=None, mix="none", mix_alpha=0.2):
        super().__init__(optimizer, scheduler, run_config, lr_scaling)
        self.save_hyperparameters()
        channels, height, width = input_shape
        self.net = build_net(net, in_channels=channels, image_size=(height, width), num_classes=num_classes)
        self.loss = build_loss(loss, nn.CrossEntropyLoss)

    def forward(self, images):
        return self.net(images)

    def step_loss(self, batch):
        images, labels = batch
        return self.loss(self(images), labels)
'''


@pytest.mark.slow
def test_predict_on_a_user_task_of_the_earlier_guide_without_predict_step_writes_rows(compose_cfg, tmp_path) -> None:
    """The real CLI, a user's task in a package of its own (trusted) written as an earlier guide taught, with no
    predict_step: predict writes its forward output, one column per class score (it was refused, then a KeyError)."""
    import sys

    from conftest import run_cli
    from litforge.testing.checks import trained_checkpoint

    (tmp_path / "usertask").mkdir()
    (tmp_path / "usertask" / "__init__.py").write_text(USER_TASK)
    sys.path.insert(0, str(tmp_path))
    try:
        cfg = compose_cfg("task._target_=usertask.PlainTask", "model.hidden_dims=[8]")
        path, *_ = trained_checkpoint(cfg, tmp_path, "train")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("usertask", None)
    logs = tmp_path / "logs"
    result = run_cli(
        "predict.py",
        f"ckpt_path={path}",
        "trusted_packages=[usertask]",
        f"output={tmp_path / 'out.csv'}",
        log_dir=logs,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.output[-3000:]
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0].startswith("input,predicted_0,predicted_1,") and len(lines) > 1, lines[:2]


def test_predict_with_input_on_data_that_cannot_read_it_is_one_line() -> None:
    """`input=<file>` on a datamodule with neither `read_inputs` nor image reading (it was an AttributeError on
    `input_shape`)."""
    from litforge.core.contracts import check_predictable
    from litforge.tasks.classification import ClassificationTask

    class Rows(pl.LightningDataModule):
        kind = "features"

    with pytest.raises(ConfigError) as refused:
        check_predictable(ClassificationTask.__new__(ClassificationTask), Rows(), "rows.csv", "ckpt_path=x.ckpt")
    message = str(refused.value)
    assert message.startswith("input=rows.csv: data `Rows` lacks `read_inputs`") and "litforge.InputReader" in message
    assert "\n" not in message


def test_generate_refuses_a_task_without_generate_text_in_one_line(compose_cfg, tmp_path: Path) -> None:
    from litforge.jobs.generate import generate
    from litforge.testing.checks import job_config, trained_checkpoint

    path, *_ = trained_checkpoint(compose_cfg("model.hidden_dims=[8]"), tmp_path, "train")
    with pytest.raises(ConfigError, match="ClassificationTask checkpoint, which does not generate text"):
        generate(job_config("generate", tmp_path, "generate", ckpt_path=str(path)))


def test_the_predict_task_check_works_on_the_class_alone_before_anything_is_built() -> None:
    """What a check before Hydra starts can call with the checkpoint's recorded class (no task built)."""
    from litforge.core.contracts import check_predict_task
    from litforge.tasks.classification import ClassificationTask
    from litforge.tasks.language_model import LanguageModelTask

    check_predict_task(ClassificationTask, "ckpt_path=a.ckpt")
    with pytest.raises(ConfigError, match=r"^ckpt_path=b.ckpt: task `LanguageModelTask` generates text, .* generate"):
        check_predict_task(LanguageModelTask, "ckpt_path=b.ckpt")
    from litforge.checkpointing.metadata import check_predict_source  # the same line from the source, before torch

    for task in ("language_model.LanguageModelTask", "dqn.DQNTask"):
        with pytest.raises(ConfigError, match="generates text|lacks `predict_step`: it has no outputs"):
            check_predict_source(f"litforge.tasks.{task}", "ckpt_path=c.ckpt")


# ---- decisions: a task's settings that may change after training (task.threshold=...) -------------------------------
@pytest.fixture(scope="module")
def classifier_ckpt(tmp_path_factory) -> Path:
    """One training step of the default classifier: its top-class probabilities are far below 0.99."""
    from litforge.testing.checks import job_config, trained_checkpoint

    tmp = tmp_path_factory.mktemp("decisions")
    cfg = job_config("train", tmp, "train", **{"model.hidden_dims": [8]})
    return trained_checkpoint(cfg, tmp, "train")[0]


def _rows(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()[1:]]


@pytest.mark.slow
def test_a_threshold_given_at_predict_time_changes_the_rows(classifier_ckpt: Path, tmp_path: Path) -> None:
    """`task.threshold=` (and `+task.threshold=`, which was accepted and ignored) is the classifier's decision:
    below it predict writes no class (-1, an empty class_name); 0.0 gives every row its class."""
    from conftest import run_cli

    outputs = {}
    for i, override in enumerate(("task.threshold=0.0", "+task.threshold=0.99")):
        out = outputs[override] = tmp_path / f"{i}.csv"
        result = run_cli("predict.py", f"ckpt_path={classifier_ckpt}", override, f"output={out}", log_dir=tmp_path)
        assert result.returncode == 0, result.output[-3000:]
    every, none = _rows(outputs["task.threshold=0.0"]), _rows(outputs["+task.threshold=0.99"])
    assert len(every) == len(none) > 0
    assert all(int(row[1]) >= 0 and row[2] for row in every), every[:3]
    assert all(row[1:3] == ["-1", ""] for row in none), none[:3]  # one step of training: no probability near 0.99
    assert [row[3] for row in every] == [row[3] for row in none]  # the same confidences, another decision


@pytest.mark.slow
def test_an_undeclared_or_mistyped_decision_is_one_line_naming_the_declared_ones(classifier_ckpt, tmp_path) -> None:
    from conftest import run_cli

    for override, expected in (
        ("task.nope=1", "task.nope=1: task `ClassificationTask` declares no decision `nope`; predict may set only"),
        ("task.threshold=2", "task.threshold=2: input should be less than or equal to 1"),
    ):
        result = run_cli("predict.py", f"ckpt_path={classifier_ckpt}", override, log_dir=tmp_path)
        errors = [line for line in result.output.splitlines() if line.startswith("litforge: error:")]
        assert result.returncode == 1 and len(errors) == 1, result.output[-3000:]
        assert expected in errors[0] and "Traceback" not in result.output, errors
        assert "task.threshold" in errors[0]  # the true hint: the decision there is (was: "did you mean task_name")


def test_eval_reports_its_metrics_at_the_threshold_given(classifier_ckpt: Path, tmp_path: Path) -> None:
    """eval's test/acc counts an abstained sample wrong; its coverage is the share that got a class."""
    from litforge.jobs.eval import evaluate
    from litforge.testing.checks import job_config

    (tmp_path / "plain").mkdir(), (tmp_path / "strict").mkdir()  # Hydra makes the run folder; no Hydra here
    plain = evaluate(job_config("eval", tmp_path, "plain", ckpt_path=str(classifier_ckpt)))
    strict = evaluate(job_config("eval", tmp_path, "strict", ckpt_path=str(classifier_ckpt), task={"threshold": 0.99}))
    assert plain["metrics"]["test/acc"] > 0 and "test/coverage" not in plain["metrics"]
    assert strict["metrics"]["test/acc"] == 0 and strict["metrics"]["test/coverage"] == 0
    assert (plain["decisions"], strict["decisions"]) == ({"threshold": 0.0}, {"threshold": 0.99})


def test_export_records_the_decisions_in_the_metadata() -> None:
    from litforge.deploy.metadata import decision_props
    from litforge.tasks.classification import ClassificationTask

    net = {"_target_": "litforge.models.mlp.MLP", "hidden_dims": [4]}
    task = ClassificationTask(net=net, optimizer={}, input_shape=[3], num_classes=2)
    task.set_decisions({"threshold": 0.3}, "export")
    assert decision_props(task) == {"decisions": '{"threshold": 0.3}'} and task.threshold == 0.3


def test_a_decision_that_is_no_constructor_argument_is_one_line_naming_the_member_and_the_job() -> None:
    """A wrongly declared `decisions` (a string, or a name the constructor does not take) is named before any
    value is set: the checkpoint rebuilds the task from its constructor's arguments."""
    from litforge.tasks.classification import ClassificationTask

    class Typo(ClassificationTask):
        decisions = ("treshold",)

    net = {"_target_": "litforge.models.mlp.MLP", "hidden_dims": [4]}
    task = Typo(net=net, optimizer={}, input_shape=[3], num_classes=2)
    with pytest.raises(ConfigError, match=r"^eval: task `Typo` declares `decisions = \('treshold',\)`") as refused:
        task.set_decisions({}, "eval")
    assert "\n" not in str(refused.value)


def test_net_of_finds_a_module_tasks_net_as_python_3_12_judges_protocols(monkeypatch):
    """From Python 3.12, `isinstance` against a runtime Protocol reads attributes with `inspect.getattr_static`, which
    does not see an `nn.Module`'s submodules: a real task would look netless. CI runs 3.11, so the 3.12 rule is stood
    in for by a HasNet whose isinstance reads statically, as 3.12's does."""
    import inspect

    from torch import nn

    from litforge.core import contracts

    class StaticallyJudged(type):
        def __instancecheck__(cls, obj: object) -> bool:
            return inspect.getattr_static(obj, "net", None) is not None

    monkeypatch.setattr(contracts, "HasNet", StaticallyJudged("HasNet", (), {}))

    class Task(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(2, 2)

    task = Task()
    assert inspect.getattr_static(task, "net", None) is None  # what 3.12's Protocol check sees
    assert contracts.net_of(task) is task.net
    assert contracts.net_of(nn.Linear(2, 2)) is None  # a module with no `net` keeps none
