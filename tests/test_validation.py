"""The one config check (litforge.config.check): pydantic judges the composed config against the typed signatures of
what it builds, then the relations across groups; once per run, where the job starts.

Fast and in-process: each bad value is judged by the same functions the CLI (tests/test_preflight.py) and the
builders call; a handful of the same mistakes go through the real CLI in tests/test_bad_input.py. The typed
declarations are kept honest from both sides: every value of every shipped option is bound to a typed argument
(nothing escapes the check), every stand-in names arguments its library class really takes (they do not rot), and
every default in conf/ passes (they are not too strict).
"""

from __future__ import annotations

import re
import typing

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from conftest import CONF
from litforge.config.check import BUILT_GROUPS, NAMED_GROUPS, check_config, check_group
from litforge.core.errors import ConfigError

JOBS = ("train", "eval", "predict", "export", "generate", "prepare")
REQUIRED = {"train": [], "prepare": ["output=shards"]}  # the others: ckpt_path


def compose(job: str = "train", *overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)

    required = REQUIRED.get(job, ["ckpt_path=run/checkpoints/last.ckpt"])
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name=job, overrides=[*required, "paths.output_dir=out", *overrides])


@pytest.mark.parametrize("job", JOBS)
def test_each_jobs_shipped_config_passes(job: str):
    check_config(compose(job))


def _options() -> list[str]:
    return sorted(
        f"{p.parent.relative_to(CONF).as_posix()}={p.stem}"
        for p in CONF.glob("*/*.yaml")
        if p.parent.name in BUILT_GROUPS and p.parent.name not in ("callbacks", "logger")
    ) + ["callbacks=[default,ema,pruning,qat,text_samples]", "logger=many", "logger=mlflow", "logger=wandb"]


def _bound(cfg) -> list[tuple[str, object]]:
    """(full key, annotation) of every value under the built groups, as check_config binds them: the signature read
    from the source (litforge.config.source), else the imported one, with a library class's stand-in on top."""
    from hydra.utils import get_object

    from litforge.config.check import GROUP_TARGETS, _targets, signature
    from litforge.config.library import STAND_INS
    from litforge.config.source import read_signature

    found = []
    for group in BUILT_GROUPS:
        node = cfg.get(group)
        scopes = [(f"{group}.{n}", node[n]) for n in node] if group in NAMED_GROUPS and node else [(group, node)]
        for scope, sub in scopes:
            for key, target_node in _targets(scope, sub) if sub is not None else []:
                name = target_node.get("_target_") or key
                params = {}
                if "." in name or name in GROUP_TARGETS:
                    name = GROUP_TARGETS.get(name, name)
                    params = (read_signature(name) or signature(get_object(name)))[0]
                params.update({arg: (kind, None) for arg, kind in STAND_INS.get(name, STAND_INS.get(key, {})).items()})
                for arg in [str(a) for a in target_node if not str(a).startswith("_")]:
                    try:
                        value = target_node[arg]
                    except Exception:  # an interpolation that resolves only inside a Hydra job
                        value = None
                    if not (OmegaConf.is_dict(value) and "_target_" in value):
                        found.append((f"{key}.{arg}", params.get(arg, (None,))[0]))
    return found


UNTYPED_BY_DESIGN = {
    "trainer.plugins",  # a list of `_target_` nodes, each built and checked on its own
    "trainer.callbacks",
    "trainer.logger",
    "trainer.strategy",
}


@pytest.mark.parametrize("option", _options())
def test_every_value_of_every_option_is_bound_to_a_typed_argument(option: str):
    """Nothing a user can set escapes the check: each key names a typed argument of what its node builds."""
    cfg = compose("train", option, *(["data.root=x"] if option == "data=image_folder" else []))
    loose = [
        f"{key} ({kind})"
        for key, kind in _bound(cfg)
        if key not in UNTYPED_BY_DESIGN and (kind is None or kind is typing.Any)
    ]
    assert not loose, f"{option}: values no signature types (annotate the argument, or a stand-in): {loose}"


def test_every_stand_in_names_arguments_its_library_class_takes():
    from hydra.utils import get_object

    from litforge.config.check import GROUP_TARGETS, signature
    from litforge.config.library import STAND_INS

    for name, row in STAND_INS.items():
        if "." not in name and name not in GROUP_TARGETS:
            continue  # a group litforge itself reads (scheduler's interval and monitor)
        real, open_ended = signature(get_object(GROUP_TARGETS.get(name, name)))
        assert open_ended or set(row) <= set(real), (name, set(row) - set(real))


def test_each_job_reads_its_own_keys_and_the_yaml_holds_every_default():
    """One place for each default (DESIGN.md): the YAML of conf/. Each job's model has exactly the top-level keys of
    the job's composed config, each required (no default of its own that could disagree with the YAML; a finder's own
    keys come from its tune option file); the check binds every job's keys; the seed is the YAML's everywhere."""
    from litforge.config.settings import JOBS, Calibration, JobSettings, Objective, Parity, Paths, Report, job_settings
    from litforge.config.settings import Train as TrainSettings

    for job, model in JOBS.items():
        cfg = compose(job)
        assert {str(k) for k in cfg.keys()} - {"hydra", *BUILT_GROUPS} == set(model.model_fields), job
        assert [n for n, f in model.model_fields.items() if not f.is_required()] == [], job
        assert job_settings(cfg, model).seed == 42, job
    for section in (Calibration, Objective, Parity, Paths, Report):
        assert all(f.is_required() for f in section.model_fields.values()), section
    assert set(JobSettings.model_fields) == {k for m in JOBS.values() for k in m.model_fields}
    with pytest.raises(ConfigError, match=r"^checkpoint_async is not set, and train reads it: set it in your top"):
        job_settings(OmegaConf.masked_copy(compose(), [k for k in compose() if k != "checkpoint_async"]), TrainSettings)
    for module in ("jobs/train", "jobs/eval", "jobs/generate", "jobs/prepare", "jobs/tuning", "testing/checks"):
        text = (CONF.parent / "src" / "litforge" / f"{module}.py").read_text()
        assert not re.search(r"cfg\.get\([^()]*,", text), f"{module}.py reads a config key with a default of its own"


# ---- one bad value: (key, value, what the message must also say) ---------------------------------------------------
BAD_VALUES = [
    # the two examples
    ("data.batch_size", 0, "expected an integer >= 1"),
    ("optimizer.lr", -1, "expected a number > 0"),
    # data
    ("data.batch_size", 2.5, "expected an integer"),
    ("data.batch_size", None, "expected an integer >= 1"),  # null where a value is required
    ("data.val_fraction", 1.0, "in [0, 1)"),
    ("data.test_fraction", -0.1, "in [0, 1)"),
    ("data.num_workers", -1, ">= 0"),
    ("data.split_seed", -3, "in [0, 4294967295]"),
    ("data.augment", "maybe", "none, flip_crop, randaugment, trivialaugment, autoaugment, true or false"),
    ("data.classes", [3, 3], "distinct"),
    ("data.classes", [10], "in [0, 9]"),
    ("data.image_size", [64, 0], "[height,width]"),
    ("data.channels", 2, "1, 3 or null"),
    ("data.tokenizer", "word", "one of char, byte"),
    ("data.block_size", 0, ">= 1"),
    ("data.steps_per_epoch", 0, ">= 1"),
    # task
    ("task.lr_scaling", "quadratic", "one of none, linear, sqrt"),
    ("task.target_tau", 0.0, "in (0, 1]"),
    ("task.target_tau", 1.5, "in (0, 1]"),
    ("task.target_sync_steps", 0, ">= 1"),
    ("task.gamma", 1.2, "in [0, 1]"),
    ("task.eps_end", -0.1, "in [0, 1]"),
    # optimizer
    ("optimizer.weight_decay", -0.01, ">= 0"),
    ("optimizer.momentum", 1.0, "in [0, 1)"),
    ("optimizer.betas", [0.9], "2 numbers"),
    ("optimizer.betas", [0.9, 1.0], "in [0, 1)"),
    # scheduler
    ("scheduler.interval", "batch", "one of epoch, step"),
    ("scheduler.scheduler.step_size", 0, ">= 1"),
    ("scheduler.scheduler.gamma", 0, "> 0"),
    ("scheduler.scheduler.pct_start", 1.0, "in (0, 1)"),
    ("scheduler.scheduler.factor", 1.5, "in (0, 1)"),
    ("scheduler.scheduler.patience", -1, ">= 0"),
    ("scheduler.scheduler.T_max", 0, ">= 1"),
    # loss
    ("loss.label_smoothing", 1.5, "in [0, 1)"),
    ("loss.gamma", -1.0, ">= 0"),
    ("loss.delta", 0, "> 0"),
    # trainer
    ("trainer.max_epochs", 0, ">= 1, -1"),
    ("trainer.max_steps", 0, ">= 1 or -1"),
    ("trainer.limit_train_batches", 0, "a batch count >= 1"),
    ("trainer.limit_train_batches", 1.5, "a fraction in (0, 1]"),
    ("trainer.limit_test_batches", 0, "a batch count >= 1"),
    ("trainer.limit_val_batches", -1, "[0, 1]"),
    ("trainer.precision", 17, "a Lightning precision"),
    ("trainer.precision", "bf16-mixd", "bf16-mixed"),
    ("trainer.accelerator", "gpx", "one of auto, cpu, gpu"),
    ("trainer.devices", 0, "a count >= 1"),
    ("trainer.devices", "two", "a count >= 1"),
    ("trainer.num_nodes", 0, "in [1, 32768]"),
    ("trainer.log_every_n_steps", 0, ">= 1"),
    ("trainer.accumulate_grad_batches", 0, ">= 1"),
    ("trainer.gradient_clip_val", -1.0, ">= 0"),
    ("trainer.gradient_clip_algorithm", "l2", "norm, value or null"),
    ("trainer.check_val_every_n_epoch", 0, ">= 1"),
    ("trainer.num_sanity_val_steps", -2, ">= -1"),
    ("trainer.val_check_interval", 0, "(0, 1]"),
    ("trainer.deterministic", "always", "true, false, warn or null"),
    # callbacks
    ("callbacks.early_stopping.patience", -1, ">= 0"),
    ("callbacks.model_checkpoint.save_top_k", -2, ">= -1"),
    ("callbacks.model_checkpoint.mode", "maximum", "one of min, max"),
    ("callbacks.nonfinite_loss.check_every_n_steps", 0, ">= 1"),
    ("callbacks.progress_bar.refresh_rate", -1, ">= 0"),
    ("callbacks.pruning.amount", 1.0, "in [0, 1)"),
    ("callbacks.pruning.method", "magnitude", "l1_unstructured"),
    ("callbacks.pruning.start_epoch", -1, ">= 0"),
    ("callbacks.qat.start_epoch", -1, ">= 0"),
    ("callbacks.ema.decay", 1.0, "in (0, 1)"),
    ("callbacks.finetune.backbone_initial_ratio_lr", 0, "in (0, 1]"),
    ("callbacks.text_samples.temperature", 0, "> 0"),
    ("callbacks.tensorboard_extras.normalize", "rows", "true, pred, all or null"),
    # strategy
    ("strategy.period", 0, ">= 1"),
    ("strategy.warmup_steps", -1, ">= 0"),
    ("strategy.tensor_parallel_size", 0, "an integer >= 1 or auto"),
    ("strategy.start_method", "thread", "one of popen, spawn"),
    # logger
    ("logger.wandb.offline", "yes", "true or false"),
    ("logger.wandb.log_model", "some", "true, false or all"),
    # top level and the other jobs
    ("seed", -1, "in [0, 4294967295]"),
    ("seed", "abc", "an integer"),
    ("steps_per_call", 0, ">= 1"),
    ("objective.mode", "maximum", "one of min, max"),
    ("test_after_training", "no", "true or false"),
    ("compile", "yes", "true, false, blocks (each block compiled on its own) or a mapping"),
    ("paths.min_free_mb", -5, ">= 0"),
    ("batch_size", 0, ">= 1"),  # predict
    ("max_new_tokens", 0, ">= 1"),  # generate
    ("temperature", 0, "> 0"),  # generate
    ("parity.min_agreement", 1.5, "in [0, 1]"),  # export
    ("input_dtype", "float16", "one of uint8, float32"),  # export
]


# the option a key needs (its group's default lacks it), and the job of a top-level key other than train's
WHERE = {
    "data.image_size": ["data=image_folder", "data.root=x"],
    "data.channels": ["data=image_folder", "data.root=x"],
    "data.num_workers": ["data=image_folder", "data.root=x"],
    "data.tokenizer": ["data=python_docs"],
    "data.block_size": ["data=python_docs"],
    "data.steps_per_epoch": ["data=cartpole"],
    "task.target_tau": ["task=dqn"],
    "task.target_sync_steps": ["task=dqn"],
    "task.gamma": ["task=dqn"],
    "task.eps_end": ["task=dqn"],
    "optimizer.momentum": ["optimizer=sgd"],
    "scheduler.scheduler.step_size": ["scheduler=step"],
    "scheduler.scheduler.gamma": ["scheduler=step"],
    "scheduler.scheduler.pct_start": ["scheduler=onecycle"],
    "scheduler.scheduler.factor": ["scheduler=plateau"],
    "scheduler.scheduler.patience": ["scheduler=plateau"],
    "loss.label_smoothing": ["loss=label_smoothing"],
    "loss.gamma": ["loss=focal"],
    "loss.alpha": ["loss=focal"],
    "loss.delta": ["task=regression", "loss=huber"],
    "callbacks.pruning": ["callbacks=[default,pruning]"],
    "callbacks.qat": ["callbacks=[default,qat]"],
    "callbacks.ema": ["callbacks=[default,ema]"],
    "callbacks.finetune": ["callbacks=[default,finetune]"],
    "callbacks.text_samples": ["callbacks=[default,text_samples]"],
    "strategy.period": ["strategy=local_sgd"],
    "strategy.warmup_steps": ["strategy=local_sgd"],
    "strategy.tensor_parallel_size": ["strategy=tp"],
    "strategy.data_parallel_size": ["strategy=fsdp"],
    "strategy.replicate_size": ["strategy=hsdp"],
    "strategy.start_method": ["strategy=ddp"],
    "logger.wandb": ["logger=wandb"],
}
JOB_OF = {"batch_size": "predict", "max_new_tokens": "generate", "temperature": "generate", "parity": "export"}
JOB_OF["input_dtype"] = "export"


def with_value(key: str, value: object):
    """The shipped config that has `key`, with `value` set there as a command line would."""
    options = next((o for prefix, o in WHERE.items() if key == prefix or key.startswith(prefix + ".")), [])
    cfg = compose(JOB_OF.get(key.split(".")[0], "train"), *options)
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def example_of(message: str, key: str) -> object:
    return OverridesParser.create().parse_override(f"x={message.rsplit(f'e.g. {key}=', 1)[1]}").value()


@pytest.mark.parametrize(("key", "value", "needle"), BAD_VALUES, ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_a_bad_value_is_refused_with_the_key_the_value_and_an_example(key: str, value: object, needle: str):
    with pytest.raises(ConfigError) as info:
        check_config(with_value(key, value))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{key}="), message  # names the key and the value as typed
    assert needle in message, message
    if f"e.g. {key}=" in message:  # the example given passes
        check_config(with_value(key, example_of(message, key)))


# the nets' bounds sit on their own constructors: the key is judged by the option that has it, not by its name alone
MODEL_VALUES = [
    ("mlp", "model.dropout", 1.0, "in [0, 1)"),
    ("mlp", "model.hidden_dims", 256, "list of integers >= 1"),  # a value of the wrong type for a list key
    ("mlp", "model.hidden_dims", [256, 0], "list of integers >= 1"),
    ("cnn", "model.channels", [], "non-empty list"),
    ("vit", "model.heads", 0, ">= 1"),
    ("vit", "model.patch_size", "4", "an integer"),
    ("gpt", "model.mlp_ratio", 0, "> 0"),
]


@pytest.mark.parametrize(
    ("option", "key", "value", "needle"), MODEL_VALUES, ids=[f"{o}:{k}={v!r}" for o, k, v, _ in MODEL_VALUES]
)
def test_a_bad_net_argument_is_refused_by_the_nets_signature(option: str, key: str, value: object, needle: str):
    cfg = compose("train", f"model={option}")
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value)
    with pytest.raises(ConfigError) as info:
        check_group("model", cfg.model)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{key}=") and f"e.g. {key}=" in message, message
    assert needle in message, message
    OmegaConf.update(cfg, key, example_of(message, key))
    check_group("model", cfg.model)  # the example itself passes


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trainer.max_steps", -1),
        ("trainer.devices", "auto"),
        ("trainer.devices", [0, 1]),
        ("trainer.devices", "0,1"),
        ("trainer.precision", 16),
        ("trainer.precision", "bf16-mixed"),
        ("trainer.limit_val_batches", 0),
        ("trainer.limit_train_batches", 1.0),
        ("trainer.limit_train_batches", 3),
        ("trainer.fast_dev_run", 5),
        ("data.image_size", 64),
        ("data.image_size", [32, 48]),
        ("data.classes", None),
        ("model.hidden_dims", []),
        ("callbacks.model_checkpoint.save_top_k", -1),
        ("callbacks.tensorboard_extras.normalize", True),
        ("compile", {"mode": "max-autotune"}),
        ("loss.alpha", [1.0, 2.0]),
        ("strategy.data_parallel_size", "auto"),
    ],
)
def test_valid_edge_values_pass(key: str, value: object):
    check_config(with_value(key, value))


# ---- relations, groups, runs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("group", "node", "needle"),
    [
        (
            "optimizer",
            {"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.0, "nesterov": True},
            "optimizer.nesterov=true needs momentum, but optimizer.momentum=0.0",
        ),
        (
            "callbacks.pruning",
            {"_target_": "litforge.callbacks.pruning.Pruning", "start_epoch": 3, "end_epoch": 1},
            "callbacks.pruning.end_epoch=1 is before callbacks.pruning.start_epoch=3",
        ),
        ("trainer", {"max_epochs": 3, "min_epochs": 5}, "trainer.min_epochs=5 is more than trainer.max_epochs=3"),
        (
            "data",
            {"_target_": "litforge.data.image_folder.ImageFolderDataModule", "root": "???"},
            "data.root has no value and is required: pass data.root=<value>",
        ),
    ],
)
def test_a_group_is_checked_with_its_relations_as_it_is_built(group: str, node: dict, needle: str):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        check_group(group, OmegaConf.create(node))


def test_relations_across_groups_are_checked_for_the_run():
    cfg = OmegaConf.create(
        {
            "trainer": {"enable_checkpointing": False},
            "callbacks": {"model_checkpoint": {"_target_": "pytorch_lightning.callbacks.ModelCheckpoint"}},
        }
    )
    with pytest.raises(ConfigError, match="also pass callbacks.model_checkpoint=null"):
        check_config(cfg)
    cfg.callbacks.model_checkpoint = None
    check_config(cfg)


def test_values_that_resolve_only_inside_a_hydra_job_are_left_for_later():
    cfg = OmegaConf.create(
        {
            "seed": 1,
            "paths": {"output_dir": "${hydra:runtime.output_dir}", "log_dir": "logs"},
            "data": {"shuffle_seed": "${seed}", "batch_size": 8},
        }
    )
    check_config(cfg)
    cfg.seed = -1  # an interpolated value is checked under its own key first
    with pytest.raises(ConfigError, match=r"^seed=-1"):
        check_config(cfg)


@pytest.mark.parametrize(
    ("trainer", "data", "says"),
    [
        ({"limit_val_batches": 0}, {}, "trainer.limit_val_batches=0"),
        (
            {"max_epochs": 3, "check_val_every_n_epoch": 5},
            {},
            "trainer.check_val_every_n_epoch=5 > trainer.max_epochs=3",
        ),
        ({}, {"val_fraction": 0.0}, "data.val_fraction=0"),
        ({"max_epochs": 5, "check_val_every_n_epoch": 5}, {"val_fraction": 0.1}, None),
    ],
)
def test_a_run_without_validation_says_so(trainer: dict, data: dict, says: str | None):
    from litforge.checkpointing.training import run_notes

    notes = run_notes(trainer, data, tested=True)
    assert (says in notes[0] and "no validation" in notes[0]) if says else not notes


# ---- configs composed in code meet the same rules where each group is built ----------------------------------------
@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("data.batch_size=0", "data.batch_size=0"),
        ("optimizer.lr=-1", "optimizer.lr=-1"),
        ("callbacks.early_stopping.patience=-1", "callbacks.early_stopping.patience=-1"),
        ("trainer.max_epochs=0", "trainer.max_epochs=0: expected an integer >= 1, -1 or null"),
        ("seed=-1", "seed=-1"),
        ("+model.foo=1", "model.foo is not an argument of litforge.models.mlp.MLP (it takes: in_channels"),
        ("+task.foo=1", "task.foo is not an argument of litforge.tasks.classification.ClassificationTask"),
        ("+callbacks.early_stopping.foo=1", "callbacks.early_stopping.foo is not an argument of"),
        ("+trainer.foo=1", "trainer.foo is not an argument of pytorch_lightning.Trainer"),
    ],
)
def test_a_config_composed_in_code_is_checked_when_its_groups_are_built(override: str, says: str, compose_cfg):
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "print_config=false",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
        "logger=csv",
        override,
    )
    with pytest.raises(ConfigError) as info:
        train(cfg)
    assert says in str(info.value), str(info.value)


def test_each_run_is_checked_once_where_it_starts_and_the_builders_never_call_the_checker(compose_cfg, monkeypatch):
    """In code, the job's start checks the config; after the command line's check of the same config, nothing does
    again; and what builds (jobs/build.py, core/instantiate.py, the tasks) imports no part of the checker (the typed
    settings it reads, litforge.config.settings, are what the check returns, not the checker)."""
    from litforge.jobs import checks
    from litforge.jobs.train import train
    from test_architecture import import_graph

    calls: list[object] = []
    real = checks.check_job
    monkeypatch.setattr(checks, "check_job", lambda cfg, job: calls.append(cfg) or real(cfg, job))
    cfg = compose_cfg("print_config=false", "trainer.fast_dev_run=true", "logger=csv", "callbacks.progress_bar=null")
    train(cfg)
    assert len(calls) == 1
    checks.check_at_start(cfg, "train")  # the same config again (the job after the command line's): not judged twice
    assert len(calls) == 1
    graph = import_graph()
    checkers = {m for m in graph if m.startswith("litforge.config") or m == "litforge.jobs.checks"}
    checkers -= {"litforge.config.settings"}
    builders = [m for m in graph if m.startswith(("litforge.tasks", "litforge.models", "litforge.data"))]
    for module in [*builders, "litforge.jobs.build", "litforge.core.instantiate"]:
        assert not graph[module] & checkers, (module, graph[module] & checkers)


@pytest.mark.parametrize("override", ["logger=wandb", "logger=[tensorboard,wandb]"])
def test_a_tracker_whose_package_is_missing_is_refused_in_one_line(override: str, compose_cfg, monkeypatch):
    import sys

    cfg = compose_cfg("print_config=false", override)
    check_config(cfg)  # installed: passes
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: `import wandb` fails
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    message = str(info.value)
    assert message.startswith(
        "logger.wandb (litforge.records.tracking.WandbLogger) needs wandb, which is not installed: it comes with "
        "litforge's `trackers` extra: pip install -e '.[trackers]'"
    ), message
    assert "\n" not in message


def test_the_precision_names_are_lightnings():
    """Lightning lists its precision names only in a private type alias (no public list to import): read it here,
    in a test, so the table follows a Lightning release that adds or drops one."""
    from lightning_fabric import connector

    from litforge.config.library import PRECISIONS, PRECISIONS_OLD

    names = {value for literal in typing.get_args(connector._PRECISION_INPUT) for value in typing.get_args(literal)}
    assert set(PRECISIONS + PRECISIONS_OLD) == names
