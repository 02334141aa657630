"""`task.mix=mixup|cutmix`: soft targets summing to 1, the loss equal to the soft-target cross-entropy by hand
(cross_entropy, label_smoothing, focal), train/acc against the soft target's argmax, bad pairs refused in one line,
and a run with `data.augment=trivialaugment task.mix=cutmix` that trains."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from litforge.core.errors import ConfigError
from litforge.jobs.build import build_task

SHAPE = {"input_shape": [1, 8, 8], "num_classes": 10, "class_names": [str(i) for i in range(10)]}


def _task(compose_cfg, *overrides: str):
    return build_task(compose_cfg(*overrides), SHAPE)


def _batch(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def _manual_soft_ce(logits: torch.Tensor, soft: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    q = soft * (1 - smoothing) + smoothing / soft.shape[1]
    return -(q * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


@pytest.mark.parametrize("mix", ["mixup", "cutmix"])
@pytest.mark.parametrize(("loss", "smoothing"), [("cross_entropy", 0.0), ("label_smoothing", 0.1), ("focal", 0.0)])
def test_mixed_batch_soft_targets_and_loss(compose_cfg, mix: str, loss: str, smoothing: float):
    extra = ["loss.gamma=0"] if loss == "focal" else []  # focal at gamma 0 is cross-entropy: checkable by hand
    task = _task(compose_cfg, f"task.mix={mix}", "task.mix_alpha=1.0", f"loss={loss}", *extra)
    task.eval()  # no dropout: the hand-made loss must see the same logits
    images, labels = _batch()
    torch.manual_seed(5)
    mixed, soft = task.mixer(images, labels)
    assert soft.shape == (32, 10) and torch.allclose(soft.sum(dim=1), torch.ones(32))
    assert not torch.equal(mixed, images) and (soft.max(dim=1).values < 1).any(), "the batch is mixed"
    torch.manual_seed(5)  # the same draw inside the training step
    loss_value = task.step_loss((images, labels))
    with torch.no_grad():
        logits = task(mixed)
    assert loss_value.item() == pytest.approx(_manual_soft_ce(logits, soft, smoothing).item(), rel=1e-5)
    expected_acc = (logits.argmax(1) == soft.argmax(1)).float().mean()
    task.flush_train_predictions()  # train/acc updates are batched (TRAIN_ACC_BATCHES steps at a time)
    assert task.train_acc.compute().item() == pytest.approx(expected_acc.item())


def test_focal_takes_soft_targets_with_gamma(compose_cfg):
    from litforge.tasks.losses import FocalLoss

    logits, labels = torch.randn(6, 4), torch.tensor([0, 1, 2, 3, 1, 0])
    one_hot = F.one_hot(labels, 4).float()
    focal = FocalLoss(gamma=2.0)
    assert focal(logits, one_hot).item() == pytest.approx(focal(logits, labels).item(), rel=1e-6)


def test_mix_none_leaves_the_batch_and_bad_pairs_are_refused(compose_cfg):
    assert _task(compose_cfg).mixer is None
    with pytest.raises(ConfigError, match=r"task.mix=mixup gives soft targets, which the loss HuberLoss") as err:
        _task(compose_cfg, "task.mix=mixup", "loss=huber")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"task.mix='blend'"):
        _task(compose_cfg, "task.mix=blend")
    with pytest.raises(ConfigError, match=r"task.mix_alpha=0"):
        _task(compose_cfg, "task.mix=cutmix", "task.mix_alpha=0")


def test_trivialaugment_with_cutmix_trains(compose_cfg, tmp_path: Path):
    from litforge.jobs.train import train

    out = tmp_path / "run"
    out.mkdir()
    cfg = compose_cfg(
        "data.augment=trivialaugment",
        "task.mix=cutmix",
        "trainer.max_epochs=2",
        "optimizer.lr=0.01",
        f"paths.output_dir={out}",
        "print_config=false",
        "logger=[]",
        "callbacks=none",
        "trainer.enable_progress_bar=false",
        "trainer.enable_checkpointing=false",
        "test_after_training=false",
        "trainer.limit_val_batches=1",
    )
    metrics = train(cfg)["metrics"]
    assert math.isfinite(metrics["train/loss"]) and math.isfinite(metrics["val/loss"])
    assert metrics["val/acc"] > 0.3 and metrics["train/acc"] > 0.2, metrics  # chance is 0.1
