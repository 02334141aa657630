"""FocalLoss and label-smoothed cross-entropy against values worked out by hand with math.exp / math.log."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from litforge.core.errors import ConfigError
from litforge.tasks.losses import FocalLoss

LOGITS = [[2.0, 1.0, 0.1], [0.5, 2.5, -1.0]]  # sample 0 is easy (target 0 wins), sample 1 is hard (target 2 loses)
TARGETS = [0, 2]


def softmax(row: list[float]) -> list[float]:
    exps = [math.exp(v) for v in row]
    return [e / sum(exps) for e in exps]


def hand_focal(gamma: float, alpha: list[float] | None = None) -> list[float]:
    """-alpha_t (1 - p_t)^gamma log p_t per sample."""
    out = []
    for row, t in zip(LOGITS, TARGETS, strict=True):
        p_t = softmax(row)[t]
        a_t = 1.0 if alpha is None else alpha[t]
        out.append(-a_t * (1 - p_t) ** gamma * math.log(p_t))
    return out


def hand_smoothed_ce(eps: float) -> list[float]:
    """-sum_c q_c log p_c with q = (1 - eps) one-hot + eps / C, PyTorch's definition of label smoothing."""
    out = []
    for row, t in zip(LOGITS, TARGETS, strict=True):
        p = softmax(row)
        q = [(1 - eps) * (c == t) + eps / len(row) for c in range(len(row))]
        out.append(-sum(qc * math.log(pc) for qc, pc in zip(q, p, strict=True)))
    return out


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(LOGITS, dtype=torch.float64), torch.tensor(TARGETS)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0, 5.0])
def test_focal_matches_hand_computed(gamma: float) -> None:
    logits, targets = inputs()
    loss = FocalLoss(gamma=gamma, reduction="none")(logits, targets)
    torch.testing.assert_close(loss, torch.tensor(hand_focal(gamma), dtype=torch.float32))


def test_focal_down_weights_easy_examples() -> None:
    logits, targets = inputs()
    ce = F.cross_entropy(logits, targets, reduction="none")
    focal = FocalLoss(gamma=2.0, reduction="none")(logits, targets).double()
    ratio = focal / ce  # (1 - p_t)^2: small for the easy sample, near 1 for the hard one
    assert ratio[0] < 0.2 and ratio[1] > 0.9


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_gamma_zero_equals_cross_entropy(label_smoothing: float) -> None:
    torch.manual_seed(0)
    logits, targets = torch.randn(16, 7), torch.randint(0, 7, (16,))
    focal = FocalLoss(gamma=0.0, label_smoothing=label_smoothing)(logits, targets)
    torch.testing.assert_close(focal, F.cross_entropy(logits, targets, label_smoothing=label_smoothing))


def test_alpha_per_class_and_scalar() -> None:
    logits, targets = inputs()
    alpha = [0.25, 0.5, 1.0]
    per_class = FocalLoss(gamma=2.0, alpha=alpha, reduction="none")(logits, targets)
    torch.testing.assert_close(per_class, torch.tensor(hand_focal(2.0, alpha), dtype=torch.float32))
    scalar = FocalLoss(gamma=2.0, alpha=0.25, reduction="none")(logits, targets)
    torch.testing.assert_close(scalar, torch.tensor([0.25 * v for v in hand_focal(2.0)], dtype=torch.float32))


def test_focal_with_label_smoothing_hand_computed() -> None:
    eps, gamma = 0.1, 2.0
    expected = []
    for row, t in zip(LOGITS, TARGETS, strict=True):
        p = softmax(row)
        q = [(1 - eps) * (c == t) + eps / 3 for c in range(3)]
        expected.append(-sum(qc * (1 - pc) ** gamma * math.log(pc) for qc, pc in zip(q, p, strict=True)))
    logits, targets = inputs()
    loss = FocalLoss(gamma=gamma, label_smoothing=eps, reduction="none")(logits, targets)
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float32))


def test_reductions() -> None:
    logits, targets = inputs()
    per_sample = hand_focal(2.0)
    none = FocalLoss(reduction="none")(logits, targets)
    assert none.shape == (2,)
    torch.testing.assert_close(FocalLoss(reduction="sum")(logits, targets), torch.tensor(sum(per_sample)))
    torch.testing.assert_close(FocalLoss(reduction="mean")(logits, targets), torch.tensor(sum(per_sample) / 2))
    torch.testing.assert_close(FocalLoss()(logits, targets), torch.tensor(sum(per_sample) / 2))


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_gradient_finite_at_extreme_logits(gamma: float, label_smoothing: float) -> None:
    # sample 0 is certain and right (p_t == 1 exactly in float32), sample 1 certain and wrong (p_t == 0)
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0]], requires_grad=True)
    loss = FocalLoss(gamma=gamma, alpha=[1.0, 2.0, 3.0], label_smoothing=label_smoothing)(logits, torch.tensor([0, 0]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert logits.grad[1].abs().sum() > 0  # the wrong sample still gets pushed


def test_half_precision_logits_are_computed_in_float32() -> None:
    logits, targets = inputs()
    loss = FocalLoss(reduction="none")(logits.half(), targets)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, torch.tensor(hand_focal(2.0)), atol=1e-3, rtol=1e-3)


def test_invalid_options_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="reduction='avg'.*mean"):
        FocalLoss(reduction="avg")
    with pytest.raises(ConfigError, match="gamma"):
        FocalLoss(gamma=-1.0)
    with pytest.raises(ConfigError, match="label_smoothing"):
        FocalLoss(label_smoothing=1.5)
    logits, targets = inputs()
    with pytest.raises(ConfigError, match="2 weights but the model predicts 3 classes"):
        FocalLoss(alpha=[0.5, 0.5])(logits, targets)


def test_alpha_is_not_saved_in_checkpoints() -> None:
    loss = FocalLoss(alpha=[0.25, 0.5, 1.0]).to(torch.float64)
    assert "alpha" not in loss.state_dict()


def test_cross_entropy_label_smoothing_hand_computed() -> None:
    logits, targets = inputs()
    loss = nn.CrossEntropyLoss(label_smoothing=0.1, reduction="none")(logits, targets)
    torch.testing.assert_close(loss, torch.tensor(hand_smoothed_ce(0.1), dtype=torch.float64))
    mean = nn.CrossEntropyLoss(label_smoothing=0.1)(logits, targets)
    torch.testing.assert_close(mean, torch.tensor(sum(hand_smoothed_ce(0.1)) / 2, dtype=torch.float64))
    assert hand_smoothed_ce(0.1)[0] > hand_smoothed_ce(0.0)[0]  # smoothing penalises a confident right answer
