"""Memory levers that run in one process: activation checkpointing (litforge.parallel.activation_checkpointing).

What they save is measured by benchmarks/memory.py; these tests pin what machine load cannot blur: the same loss and
gradients, and how many unit forwards are recomputed.
"""

from __future__ import annotations

import copy

import pytest
import torch

from litforge.core.errors import ConfigError
from litforge.models.gpt import GPT
from litforge.parallel.activation_checkpointing import apply_activation_checkpointing
from litforge.runtime.compat import is_checkpointed


class _Task(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net


def _loss_and_grads(net: GPT, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    net.zero_grad()
    logits = net(idx[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in net.named_parameters()}


@pytest.mark.parametrize("mode, recomputed", [("full", 4), ("selective", 2)])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(mode: str, recomputed: int):
    torch.manual_seed(0)
    plain = GPT(vocab_size=17, block_size=16, dim=32, depth=4, heads=2, dropout=0.1)  # dropout: the RNG is replayed
    checkpointed = copy.deepcopy(plain)
    assert apply_activation_checkpointing(checkpointed, mode) == recomputed
    assert [is_checkpointed(b) for b in checkpointed.blocks] == [mode == "full" or i % 2 == 0 for i in range(4)]
    assert checkpointed.state_dict().keys() == plain.state_dict().keys()  # checkpoints stay interchangeable

    calls = []
    for block in checkpointed.blocks:
        block.attn.register_forward_hook(lambda *_: calls.append(1))
    idx = torch.randint(0, 17, (3, 17), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    loss, grads = _loss_and_grads(plain, idx)
    torch.manual_seed(2)
    loss_ac, grads_ac = _loss_and_grads(checkpointed, idx)
    assert len(calls) == 4 + recomputed  # one forward per block, plus one recompute per checkpointed block
    torch.testing.assert_close(loss_ac, loss, atol=1e-6, rtol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ac[name], grad, atol=1e-6, rtol=0, msg=name)


def test_activation_checkpointing_refuses_what_it_cannot_apply():
    with pytest.raises(ConfigError, match="activation_checkpointing='some' is not one of none, full, selective"):
        apply_activation_checkpointing(GPT(vocab_size=5, block_size=4, dim=8, depth=1, heads=1), "some")
    with pytest.raises(ConfigError, match="Linear declares none: set activation_checkpointing=none"):
        apply_activation_checkpointing(torch.nn.Linear(2, 2), "full")
    assert apply_activation_checkpointing(torch.nn.Linear(2, 2), "none") == 0


def test_checkpointed_units_survive_pickling_as_ddp_spawn_sends_the_task():
    import pickle

    task = _Task(GPT(vocab_size=5, block_size=4, dim=8, depth=2, heads=1))
    apply_activation_checkpointing(task.net, "full")
    copy_ = pickle.loads(pickle.dumps(task.net))
    assert all(
        is_checkpointed(b) and b.forward.args[0] is b for b in copy_.blocks
    )  # bound to the copy, not the original
    idx = torch.randint(0, 5, (2, 4), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(copy_(idx), task.net(idx))
