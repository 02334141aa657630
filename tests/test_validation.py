"""The config rule table (litforge.config.validation), and its boundary: each group is checked where it is built.

Fast and in-process: each bad value is judged by the same functions the CLI (tests/test_preflight.py) and the
builders call; a handful of the same mistakes go through the real CLI in tests/test_bad_input.py. The table is kept
honest from both sides: every key a rule names exists in some conf/ option (rules do not rot), and every default in
conf/ passes (rules are not too strict: tests/test_configs.py checks each option as composed, this file the job
configs as shipped).
"""

from __future__ import annotations

import fnmatch

import pytest
from omegaconf import OmegaConf

from conftest import CONF
from litforge.config.validation import (
    RELATIONS,
    RULES,
    check_config,
    check_group,
    check_run,
    check_value,
    leaves,
    run_notes,
)
from litforge.core.errors import ConfigError

JOBS = ("train", "eval", "predict", "export", "generate", "prepare")


# ---- the table itself ------------------------------------------------------------------------------------------------
def conf_keys() -> set[str]:
    """Every full key some conf/ option sets, read from the YAML files (`@package _global_` ones at the root)."""
    keys: set[str] = set()

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                full = f"{prefix}.{key}" if prefix else str(key)
                keys.add(full)
                walk(full, value)

    for path in CONF.rglob("*.yaml"):
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        data.pop("defaults", None)
        group = path.parent.relative_to(CONF).as_posix()
        is_global = group == "." or "# @package _global_" in path.read_text().splitlines()[0]
        walk("" if is_global else group.replace("/", "."), data)
    return keys


def test_every_key_a_rule_or_relation_names_exists_in_some_option():
    keys = conf_keys()
    named = [*RULES, *(key for relation in RELATIONS for key in relation.keys)]
    missing = [pattern for pattern in named if not any(fnmatch.fnmatchcase(key, pattern) for key in keys)]
    assert not missing, f"rules for keys no conf/ option has (renamed or removed?): {missing}"


@pytest.mark.parametrize("key", sorted(RULES))
def test_every_rules_example_fits_the_rule_as_typed(key: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    rule = RULES[key]
    value = OverridesParser.create().parse_override(f"x={rule.example}").value()  # as the command line parses it
    assert rule.problem(key, value) is None, (key, rule.example)


@pytest.mark.parametrize("job", JOBS)
def test_each_jobs_shipped_config_passes(job: str):
    from hydra import compose, initialize_config_dir

    required = {"train": [], "prepare": ["output=shards"]}.get(job, ["ckpt_path=run/checkpoints/last.ckpt"])
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=job, overrides=[*required, "paths.output_dir=out"])
    check_config(cfg)
    assert sum(1 for _ in leaves("", cfg)) > 10  # the walk really saw the config


# ---- one bad value: (key, value, what the message must also say) -----------------------------------------------------
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
    ("data.augment", "maybe", "one of none, flip_crop, randaugment"),
    ("data.classes", [3, 3], "distinct"),
    ("data.classes", [10], "in [0, 9]"),
    ("data.image_size", [64, 0], "[height,width]"),
    ("data.channels", 2, "one of 1, 3"),
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
    ("trainer.max_epochs", 0, "trains nothing"),
    ("trainer.max_steps", 0, "trains nothing"),
    ("trainer.limit_train_batches", 0, "trains nothing"),
    ("trainer.limit_train_batches", 1.5, "a fraction in (0, 1]"),
    ("trainer.limit_test_batches", 0, "test_after_training=false"),
    ("trainer.limit_val_batches", -1, "[0, 1]"),
    ("trainer.precision", 17, "a Lightning precision"),
    ("trainer.precision", "bf16-mixd", "bf16-mixed"),
    ("trainer.accelerator", "gpx", "one of auto, cpu, gpu"),
    ("trainer.devices", 0, "a count >= 1"),
    ("trainer.devices", "two", "a count >= 1"),
    ("trainer.num_nodes", 0, ">= 1"),
    ("trainer.log_every_n_steps", 0, ">= 1"),
    ("trainer.accumulate_grad_batches", 0, ">= 1"),
    ("trainer.gradient_clip_val", -1.0, ">= 0"),
    ("trainer.gradient_clip_algorithm", "l2", "one of norm, value"),
    ("trainer.check_val_every_n_epoch", 0, ">= 1"),
    ("trainer.num_sanity_val_steps", -2, ">= -1"),
    ("trainer.val_check_interval", 0, "(0, 1]"),
    ("trainer.deterministic", "always", "true, false or warn"),
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
    ("callbacks.tensorboard_extras.normalize", "rows", "one of true, pred, all"),
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
    ("compile", "yes", "true, false or a mapping"),
    ("paths.min_free_mb", -5, ">= 0"),
    ("batch_size", 0, ">= 1"),  # predict
    ("max_new_tokens", 0, ">= 1"),  # generate
    ("temperature", 0, "> 0"),  # generate
    ("parity.min_agreement", 1.5, "in [0, 1]"),  # export
    ("input_dtype", "float16", "one of uint8, float32"),  # export
]


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
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"model={option}", "paths.output_dir=out"])
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value)
    with pytest.raises(ConfigError) as info:
        check_group("model", cfg.model)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{key}=") and f"e.g. {key}=" in message, message
    assert needle in message, message
    example = message.rsplit(f"e.g. {key}=", 1)[1]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    OmegaConf.update(cfg, key, OverridesParser.create().parse_override(f"x={example}").value())
    check_group("model", cfg.model)  # the example itself passes


@pytest.mark.parametrize(("key", "value", "needle"), BAD_VALUES, ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_a_bad_value_is_refused_with_the_key_the_value_and_an_example(key: str, value: object, needle: str):
    with pytest.raises(ConfigError) as info:
        check_value(key, value)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{key}="), message  # names the key and the value as typed
    assert f"e.g. {key}=" in message, message  # and a valid example
    assert needle in message, message
    example = message.rsplit(f"e.g. {key}=", 1)[1]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    check_value(key, OverridesParser.create().parse_override(f"x={example}").value())  # the example itself passes


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trainer.max_epochs", -1),
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
        ("some.key.without.a.rule", object()),
    ],
)
def test_valid_edge_values_pass(key: str, value: object):
    check_value(key, value)


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
            {"_target_": "x", "start_epoch": 3, "end_epoch": 1},
            "callbacks.pruning.end_epoch=1 is before callbacks.pruning.start_epoch=3",
        ),
        ("trainer", {"max_epochs": 3, "min_epochs": 5}, "trainer.min_epochs=5 is more than trainer.max_epochs=3"),
        ("data", {"_target_": "x", "root": "???"}, "data.root has no value and is required: pass data.root=<value>"),
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
        check_run(cfg)
    cfg.callbacks.model_checkpoint = None
    check_run(cfg)


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
    notes = run_notes(OmegaConf.create({"trainer": trainer, "data": data}))
    assert (says in notes[0] and "no validation" in notes[0]) if says else not notes


# ---- configs composed in code meet the same rules where each group is built ----------------------------------------
@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("data.batch_size=0", "data.batch_size=0"),
        ("optimizer.lr=-1", "optimizer.lr=-1"),
        ("callbacks.early_stopping.patience=-1", "callbacks.early_stopping.patience=-1"),
        ("trainer.max_epochs=0", "trainer.max_epochs=0 trains nothing"),
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


def test_train_checks_each_group_exactly_once(compose_cfg, monkeypatch):
    """The groups are checked where they are built, and nowhere twice (one table, one boundary)."""
    import litforge.config.instantiate
    import litforge.jobs.build
    from litforge.config import validation
    from litforge.jobs.train import train

    seen: list[str] = []

    def counting(scope: str, node: object) -> None:
        seen.append(scope)
        validation.check_group(scope, node)

    monkeypatch.setattr(litforge.config.instantiate, "check_group", counting)
    monkeypatch.setattr(litforge.jobs.build, "check_group", counting)
    cfg = compose_cfg("print_config=false", "trainer.fast_dev_run=true", "logger=csv", "callbacks.progress_bar=null")
    train(cfg)
    expected = {
        "data",
        "model",
        "optimizer",
        "scheduler",
        "loss",
        "task",
        "trainer",
        "strategy",
        *(f"callbacks.{name}" for name, node in cfg.callbacks.items() if node is not None),
        "logger.csv",
    }
    assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("override", ["logger=wandb", "logger=[tensorboard,wandb]"])
def test_a_tracker_whose_package_is_missing_is_refused_in_one_line(override: str, compose_cfg, monkeypatch):
    import sys

    cfg = compose_cfg("print_config=false", override)
    check_config(cfg)  # installed: passes
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: `import wandb` fails
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    message = str(info.value)
    assert message.startswith("logger.wandb needs the wandb package, which is not installed: pip install wandb==0.31.0")
    assert "\n" not in message


def test_the_precision_names_are_lightnings():
    """Lightning lists its precision names only in a private type alias (no public list to import): read it here,
    in a test, so the table follows a Lightning release that adds or drops one."""
    import typing

    from lightning_fabric import connector

    from litforge.config.validation import PRECISIONS

    names = {value for literal in typing.get_args(connector._PRECISION_INPUT) for value in typing.get_args(literal)}
    assert set(PRECISIONS) == names
