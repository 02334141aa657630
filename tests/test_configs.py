"""Every option of every config group composes, passes the rule table, instantiates, and (on the embedded data) trains
a batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import CONF, make_image_folder

GROUPS = [
    "data",
    "model",
    "task",
    "optimizer",
    "scheduler",
    "loss",
    "callbacks",
    "logger",
    "trainer",
    "strategy",
    "debug",
    "experiment",
    "hparams_search",
]
# datasets that need files a test cannot download: composed and constructed, but not trained on here
NEEDS_DOWNLOAD = {"mnist", "fashion_mnist", "cifar10"}
# options that start several processes or need hardware: composed and built, trained in their own tests
NOT_IN_PROCESS = {
    ("strategy", name)
    for name in (
        "ddp",
        "ddp_spawn",
        "fsdp",
        "hsdp",
        "tp",
        "fsdp_tp",
        "tpu",
        "local_sgd",
        "diloco",
        "hogwild",
        "pipeline",
    )
}
NOT_IN_PROCESS |= {("trainer", "gpu")}  # no GPU here; its clear error is tested with the bad inputs
NOT_IN_PROCESS |= {("trainer", name) for name in ("ddp", "mps", "ddp_sim")}  # GPUs, Apple GPUs, 2 processes
# options that only make sense with a matching task/data/model: composed with their partners (and tiny sizes)
LM = [
    "task=language_model",
    "data=python_docs",
    "model=gpt",
    "data.max_chars=20000",
    "data.block_size=32",
    "model.dim=32",
    "model.depth=1",
]
RL = [
    "task=dqn",
    "data=cartpole",
    "model=qnet",
    "loss=huber",
    "data.val_episodes=1",
    "data.test_episodes=1",
    "task.warmup_steps=64",
]
TEXT = ["task=multilabel", "data=text", "model=text_pool"]  # labelled texts: the shipped support messages
TABLE = ["task=regression", "data=csv", "data.dataset=diabetes", "data.target_kind=value"]  # regression's partners
# the sized GPT presets (model=gpt_7b, ...) are model=gpt at real sizes: trained here at a tiny one (their real
# sizes are planned, never allocated: tests/test_dry_run.py, tests/test_contracts.py)
TINY_GPT = [
    "model.dim=16",
    "model.depth=1",
    "model.heads=2",
    "model.vocab_size=256",
    "model.block_size=16",
    "data.block_size=16",
    "data.max_chars=5000",
    "data.batch_size=4",
]
PARTNERS = {
    **{("model", preset): TINY_GPT for preset in ("gpt2_124m", "gpt2_350m", "gpt_1b", "gpt_7b")},
    ("task", "regression"): TABLE,
    ("loss", "mse"): TABLE,
    ("loss", "l1"): TABLE,
    ("task", "language_model"): LM,
    ("data", "python_docs"): LM,
    ("model", "gpt"): LM,
    ("data", "text_file"): LM,
    ("callbacks", "text_samples"): [*LM, "callbacks.text_samples.max_new_tokens=8"],
    ("task", "multilabel"): TEXT,
    ("data", "text"): TEXT,
    ("model", "text_pool"): TEXT,
    ("model", "text_transformer"): [*TEXT[:2], "model=text_transformer", "model.dim=16", "model.depth=1"],
    ("loss", "bce"): TEXT,
    ("task", "dqn"): RL,
    ("data", "cartpole"): RL,
    ("model", "qnet"): RL,
    ("loss", "huber"): RL,
    ("experiment", "finetune_resnet"): ["model.pretrained=false", "data.image_size=64"],  # offline here
    ("experiment", "gpt_char"): ["data.max_chars=20000", "trainer.val_check_interval=1.0"],
    ("experiment", "cartpole_dqn"): RL[4:],
}


def options() -> list[tuple[str, str]]:
    return [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]


def test_every_group_has_options():
    found = {g for g, _ in options()}
    assert found >= {
        "data",
        "model",
        "task",
        "optimizer",
        "scheduler",
        "loss",
        "callbacks",
        "logger",
        "trainer",
        "strategy",
        "debug",
        "experiment",
    }


@pytest.mark.slow  # each option trains a few steps: up to 14 s for a GPT or a SLURM trainer
@pytest.mark.parametrize(("group", "option"), options(), ids=lambda v: str(v))
def test_option_composes_builds_and_trains(group: str, option: str, compose_cfg, tmp_path: Path):
    from hydra.utils import instantiate

    from litforge.config.check import check_config
    from litforge.core.instantiate import instantiate_named
    from litforge.jobs.build import build_task
    from litforge.jobs.train import train
    from litforge.parallel.launch import launched_ranks_cleaned_up

    partners = [o for o in PARTNERS.get((group, option), []) if not o.startswith(f"{group}=")]
    overrides = [*partners, f"{group}={option}", "print_config=false"]
    if group == "logger":
        overrides.append(f"paths.log_dir={tmp_path}")  # logger=mlflow keeps its store under paths.log_dir
    if (group, option) == ("data", "text_file"):
        (tmp_path / "corpus.txt").write_text("a small corpus of text, long enough for a few windows. " * 40)
        overrides.append(f"data.path={tmp_path / 'corpus.txt'}")
    if group == "data" and option == "image_folder" or "image_folder" in option or option == "finetune_resnet":
        overrides.append(f"data.root={make_image_folder(tmp_path / 'images')}")
    if group == "data" and option == "streaming":  # shards of a small digits subset, as prepare writes them
        from litforge.data.digits import DigitsDataModule
        from litforge.data.streaming import write_shards

        write_shards(DigitsDataModule(classes=[0, 1, 2], train_per_class=20), str(tmp_path / "shards"))
        overrides.append(f"data.input_dir={tmp_path / 'shards'}")
    cfg = compose_cfg(*overrides)
    check_config(cfg)  # every default of every option passes the typed check (not too strict)

    datamodule = instantiate(cfg.data, _convert_="all")
    task = build_task(cfg, datamodule.describe())
    if getattr(datamodule, "kind", "image") == "image":
        channels, height, width = datamodule.input_shape
        logits = task(torch.zeros(2, channels, height, width))
        assert logits.shape == (2, datamodule.num_classes)
    instantiate_named("callbacks", cfg.get("callbacks"))
    instantiate_named("logger", cfg.get("logger"))

    data_name = cfg.data._target_.rsplit(".", 1)[-1].lower()
    if any(name.replace("_", "") in data_name for name in NEEDS_DOWNLOAD) or (group, option) in NOT_IN_PROCESS:
        return
    cfg.trainer.max_epochs = 1
    cfg.trainer.limit_train_batches = 2
    cfg.trainer.limit_val_batches = 1
    cfg.trainer.limit_test_batches = 1
    cfg.trainer.enable_progress_bar = False
    cfg.trainer.overfit_batches = 0.0
    cfg.trainer.profiler = cfg.trainer.profiler if option == "profiler" else None
    with launched_ranks_cleaned_up():  # a launching strategy left here would make every later run wait for rank 1
        result = train(cfg)
    assert any(name.startswith("test/") for name in result["metrics"]) or cfg.trainer.fast_dev_run
