"""Transfer learning: head/backbone split of every net, task.init_from, BackboneFinetuning, and that it pays."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from litforge.core.errors import CheckpointError, ConfigError
from litforge.models import transfer
from litforge.models.cnn import CNN
from litforge.models.mlp import MLP
from litforge.models.resnet import ResNet
from litforge.models.vit import VisionTransformer


@pytest.mark.parametrize(
    ("net", "head"),
    [
        (ResNet(1, (8, 8), 3), "net.fc"),
        (CNN(1, (8, 8), 3), "head"),
        (VisionTransformer(1, (8, 8), 3, dim=16, depth=1, heads=2), "head"),
        (MLP(1, (8, 8), 3, hidden_dims=(8,)), "net.4"),
    ],
)
def test_head_and_backbone_split_every_net(net, head):
    assert transfer.head_name(net) == head
    head_params = {id(p) for p in net.get_submodule(head).parameters()}
    backbone_params = {id(p) for p in transfer.backbone(net).parameters()}
    root_params = {id(p) for p in net.parameters(recurse=False)}  # a ViT's cls_token / pos_embed
    assert not head_params & backbone_params
    assert head_params | backbone_params | root_params == {id(p) for p in net.parameters()}


def test_load_backbone_replaces_only_the_head():
    torch.manual_seed(0)
    source, target = CNN(1, (8, 8), 5, channels=(8, 16)), CNN(1, (8, 8), 10, channels=(8, 16))
    fresh_head = target.head.weight.clone()
    assert transfer.load_backbone(target, source.state_dict(), "src.ckpt") == ["head.weight", "head.bias"]
    assert torch.equal(target.features[0][0].weight, source.features[0][0].weight)
    assert torch.equal(target.head.weight, fresh_head)
    with pytest.raises(CheckpointError, match="features.*only the head"):
        transfer.load_backbone(CNN(1, (8, 8), 10, channels=(8, 32)), source.state_dict(), "src.ckpt")
    with pytest.raises(CheckpointError, match="different architecture"):
        transfer.load_backbone(MLP(1, (8, 8), 10), source.state_dict(), "src.ckpt")


def _train(compose_cfg, out: Path, *overrides: str) -> dict:
    from litforge.jobs.train import train

    cfg = compose_cfg(
        *overrides,
        f"paths.output_dir={out}",
        "print_config=false",
        "logger=csv",
        "callbacks.progress_bar=null",
        "callbacks.model_summary=null",
        "trainer.enable_progress_bar=false",
    )
    out.mkdir(parents=True, exist_ok=True)
    return train(cfg)


@pytest.mark.parametrize("scheduler", ["cosine", "onecycle"])
def test_init_from_and_backbone_finetuning(compose_cfg, tmp_path: Path, scheduler: str):
    """Pretrain on 0-4; fine-tune on 5-9 from it: the backbone stays frozen (out of the optimizer) until the unfreeze
    epoch, then trains as a second param group. OneCycleLR cannot take a group added mid-run: a clear error."""
    small = ["model=cnn", "model.channels=[8,16]", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    pre = _train(
        compose_cfg,
        tmp_path / "pre",
        *small,
        "data.classes=[0,1,2,3,4]",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
    )
    pre_state = torch.load(pre["last_checkpoint"], weights_only=True)["state_dict"]
    common = [
        *small,
        "experiment=transfer_digits",
        f"task.init_from={pre['last_checkpoint']}",
        f"scheduler={scheduler}",
        "callbacks.finetune.unfreeze_backbone_at_epoch=1",
        "trainer.check_val_every_n_epoch=1",
    ]
    if scheduler == "onecycle":
        with pytest.raises(ConfigError, match="onecycle"):
            _train(compose_cfg, tmp_path / "frozen", *common, "trainer.max_epochs=1")
        return
    frozen = _train(compose_cfg, tmp_path / "frozen", *common, "trainer.max_epochs=1")
    state = torch.load(frozen["last_checkpoint"], weights_only=True)
    conv = "net.features.0.0.weight"
    assert torch.equal(state["state_dict"][conv], pre_state[conv])  # loaded, then frozen
    assert state["state_dict"]["net.head.weight"].shape == (5, 16)  # a new head for the 5 new classes
    assert len(state["optimizer_states"][0]["param_groups"]) == 1
    # head weight + bias, and the backbone's 4 BatchNorm layers (weight + bias): BackboneFinetuning keeps BN trainable
    assert len(state["optimizer_states"][0]["param_groups"][0]["params"]) == 2 + 4 * 2

    with warnings.catch_warnings(record=True) as caught, _records("litforge.callbacks.finetuning") as said:
        warnings.simplefilter("always")
        unfrozen = _train(compose_cfg, tmp_path / "unfrozen", *common, "trainer.max_epochs=3")
    state = torch.load(unfrozen["last_checkpoint"], weights_only=True)
    assert not torch.equal(state["state_dict"][conv], pre_state[conv])
    groups = state["optimizer_states"][0]["param_groups"]
    assert len(groups) == 2  # the backbone joined as its own param group
    assert len(groups[1]["params"]) == 2 * 2  # its 2 convolutions (weight + bias); BatchNorm was in the head's group
    assert not [w for w in caught if "already exist within another group" in str(w.message)]  # Lightning's, per run
    assert len(said) == 1 and said[0].startswith("epoch 1: the backbone is unfrozen: 4 of its tensors join the"), said


@contextmanager
def _records(name: str) -> Iterator[list[str]]:
    """The messages logged to `name` inside the block (whatever handlers and levels earlier tests left)."""
    said: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    disabled, level, logger.disabled = logger.disabled, logger.level, False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.disabled, logger.level = disabled, level


def test_init_from_a_different_net_is_a_clear_error(compose_cfg, tmp_path: Path):
    pre = _train(
        compose_cfg,
        tmp_path / "pre",
        "model=mlp",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=1",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
    )
    with pytest.raises(CheckpointError, match="different architecture"):
        _train(
            compose_cfg,
            tmp_path / "ft",
            "model=cnn",
            f"task.init_from={pre['best_checkpoint']}",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=1",
        )


@pytest.mark.slow
def test_transfer_beats_scratch_on_few_examples(compose_cfg, tmp_path: Path):
    """The claim of experiment=transfer_digits, on one seed: 5 examples per digit 5-9 (benchmarks/ averages more)."""
    pre = _train(compose_cfg, tmp_path / "pre", "model=cnn", "data.classes=[0,1,2,3,4]", "trainer.max_epochs=10")
    few = ["experiment=transfer_digits", "data.train_per_class=5"]
    # from the pretraining's best epoch (last.ckpt is the latest state, possibly over-fitted to digits 0-4)
    transfer_acc = _train(compose_cfg, tmp_path / "t", *few, f"task.init_from={pre['best_checkpoint']}")
    scratch_acc = _train(compose_cfg, tmp_path / "s", *few, "~callbacks.finetune")
    assert transfer_acc["metrics"]["test/acc"] > scratch_acc["metrics"]["test/acc"], (transfer_acc, scratch_acc)
