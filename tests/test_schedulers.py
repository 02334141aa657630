"""scheduler=warmup_cosine: the LR curve step by step, the warmup as steps or a fraction, resume, refusals."""

from __future__ import annotations

import math

import pytest
import torch

from litforge.core.errors import ConfigError
from litforge.tasks.schedulers import WarmupCosine


def _curve(steps: int, **kwargs) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = WarmupCosine(optimizer, total_steps=steps, **kwargs)
    lrs = []
    for _ in range(steps):  # the lr each optimizer step trains with, then the scheduler steps (interval=step)
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_linear_warmup_to_the_peak_then_cosine_to_eta_min():
    lrs = _curve(10, warmup_steps=4, eta_min=0.1)
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])  # linear, never 0, peak on step W-1
    decay = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 6)) for k in range(6)]
    assert lrs[4:] == pytest.approx(decay)  # cosine over the remaining T-W steps
    assert lrs[3] == lrs[4] == 1.0 and all(a > b for a, b in zip(lrs[4:], lrs[5:], strict=False)) and lrs[-1] > 0.1


def test_the_warmup_can_be_a_fraction_of_the_run_and_zero_is_plain_cosine():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert WarmupCosine(optimizer, total_steps=200, warmup_fraction=0.1).warmup_steps == 20
    lrs = _curve(8, warmup_steps=0)
    expected = [0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)]
    assert lrs == pytest.approx(expected)


def test_a_resumed_schedule_continues_the_same_curve():
    full = _curve(12, warmup_steps=3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    first = WarmupCosine(optimizer, total_steps=12, warmup_steps=3)
    for _ in range(5):
        optimizer.step()
        first.step()
    optimizer2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    optimizer2.load_state_dict(optimizer.state_dict())
    second = WarmupCosine(optimizer2, total_steps=12, warmup_steps=3)
    second.load_state_dict(first.state_dict())
    optimizer2.param_groups[0]["lr"] = second.get_last_lr()[0]
    rest = []
    for _ in range(7):
        rest.append(optimizer2.param_groups[0]["lr"])
        optimizer2.step()
        second.step()
    assert rest == pytest.approx(full[5:])


def test_a_warmup_as_long_as_the_run_is_refused_with_the_key_and_an_example():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ConfigError, match=r"scheduler.scheduler.warmup_steps=50 .* 40 scheduler steps.*warmup_steps=4"):
        WarmupCosine(optimizer, total_steps=40, warmup_steps=50)


def test_the_config_fills_the_run_length_and_checks_the_fraction(compose_cfg):
    from litforge.config.check import check_config

    cfg = compose_cfg("scheduler=warmup_cosine")
    check_config(cfg)
    assert cfg.scheduler.interval == "step" and cfg.scheduler.scheduler.total_steps is None
    with pytest.raises(ConfigError, match=r"scheduler.scheduler.warmup_fraction=1.5: expected"):
        check_config(compose_cfg("scheduler=warmup_cosine", "scheduler.scheduler.warmup_fraction=1.5"))


def test_a_param_group_added_mid_run_follows_the_curve_from_where_it_joins():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = WarmupCosine(optimizer, total_steps=10, warmup_steps=2)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    first = optimizer.param_groups[0]["lr"]
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": first / 10})  # finetune's way
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    main, added = (group["lr"] for group in optimizer.param_groups)
    assert added == pytest.approx(main / 10) and main < first
