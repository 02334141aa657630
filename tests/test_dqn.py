"""DQN: replay stream, Double DQN targets, hard and soft target updates, config and environment checks, and a short
training run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from litforge.data.gym import GymDataModule, ReplayBuffer, ReplayStream
from litforge.errors import ConfigError


def test_replay_stream_samples_what_the_buffer_holds_now():
    buffer = ReplayBuffer(capacity=4, observation_size=2)
    stream = ReplayStream(buffer, length=50)
    for i in range(6):  # wraps around: only the last 4 remain
        buffer.add([i, i], action=i % 2, reward=float(i), next_obs=[i + 1, i + 1], done=i == 5)
    rewards = {float(t[2]) for t in stream}
    assert len(buffer) == 4 and rewards == {2.0, 3.0, 4.0, 5.0}


def test_env_checks():
    with pytest.raises(ConfigError, match="discrete"):
        GymDataModule(env_id="Pendulum-v1")
    with pytest.raises(ConfigError, match="not a gymnasium environment"):
        GymDataModule(env_id="NoSuchEnv-v0")
    assert GymDataModule(env_id="Acrobot-v1").describe() == {"observation_size": 6, "num_actions": 3}


def test_short_dqn_run_learns_from_the_buffer(compose_cfg, tmp_path: Path):
    """A few hundred steps of the recipe (soft target updates here): epsilon and the lr decay, returns and loss are
    logged, the target net is not optimised and trails the online net."""
    from litforge.train import train

    cfg = compose_cfg("experiment=cartpole_dqn", "print_config=false", "logger=csv", "data.steps_per_epoch=150",
                      "data.val_episodes=2", "data.test_episodes=2", "trainer.max_epochs=2", "task.warmup_steps=200",
                      "task.target_sync_steps=10", "task.target_tau=0.5", "task.eps_decay_steps=250", "callbacks.progress_bar=null",
                      "trainer.enable_progress_bar=false")
    result = train(cfg)
    m = result["metrics"]
    assert m["train/epsilon"] == pytest.approx(0.04)  # 300 env steps after warm-up > 250: fully decayed
    assert 0 < m["lr-Adam"] < cfg.optimizer.lr  # cosine, per step: lower after the first epoch
    assert "train/episode_return" in m and m["test/return"] >= 8 and "val/return" in m
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    online = [k for k in ckpt["state_dict"] if k.startswith("net.")]
    assert len(ckpt["optimizer_states"][0]["param_groups"][0]["params"]) == len(online)  # target net not optimised
    sd = ckpt["state_dict"]
    assert not torch.equal(sd["target_net.net.0.weight"], sd["net.net.0.weight"])  # tau=0.5: halfway, not a copy


def make_task(**kwargs):
    from litforge.tasks.dqn import DQNTask

    return DQNTask(net={"_target_": "litforge.models.qnet.QNetwork", "_partial_": True, "hidden_dims": [8]},
                   optimizer={"_target_": "torch.optim.Adam", "_partial_": True}, observation_size=4, num_actions=2,
                   **kwargs)


def test_target_net_syncs_every_n_steps():
    task = make_task(target_sync_steps=100)
    with torch.no_grad():
        task.net.net[0].weight.add_(1.0)
    assert not task.maybe_sync_target(99)
    assert not torch.equal(task.net.net[0].weight, task.target_net.net[0].weight)
    assert task.maybe_sync_target(200)
    assert torch.equal(task.net.net[0].weight, task.target_net.net[0].weight)
    assert not any(p.requires_grad for p in task.target_net.parameters())


class FixedQ(torch.nn.Module):
    """Q-values looked up by the first observation entry (a state index): a hand-made Q table."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = torch.tensor(table)

    def forward(self, obs):
        return self.table[obs[:, 0].long()]


@pytest.mark.parametrize("double", [False, True])
def test_td_target_by_hand(double):
    """Online Q prefers action 1 in state 0 and action 0 in state 1; the target net disagrees in both."""
    task = make_task(gamma=0.9, double_dqn=double)
    task.net = FixedQ([[1.0, 5.0], [4.0, 2.0]])
    task.target_net = FixedQ([[3.0, 2.0], [6.0, 7.0]])
    next_obs = torch.tensor([[0.0, 0, 0, 0], [1.0, 0, 0, 0], [1.0, 0, 0, 0]])
    rewards, dones = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.0, 0.0, 1.0])
    if double:  # target net's value of the online net's argmax: Q_t(0, 1) = 2, Q_t(1, 0) = 6
        expected = [1 + 0.9 * 2.0, 1 + 0.9 * 6.0, 1.0]
    else:  # max of the target net: 3 and 7
        expected = [1 + 0.9 * 3.0, 1 + 0.9 * 7.0, 1.0]
    assert task.td_target(rewards, next_obs, dones).tolist() == pytest.approx(expected)


def test_soft_update_moves_target_by_tau():
    task = make_task(target_sync_steps=1, target_tau=0.25)
    online = [p.detach().clone() for p in task.net.parameters()]
    with torch.no_grad():
        for p in task.target_net.parameters():
            p.copy_(torch.randn_like(p))
    before = [p.detach().clone() for p in task.target_net.parameters()]
    assert task.maybe_sync_target(7)
    for o, b, t in zip(online, before, task.target_net.parameters(), strict=True):
        assert torch.allclose(t, b + 0.25 * (o - b))  # a quarter of the way to the online net
        assert not torch.allclose(t, o)
    assert all(torch.equal(a, b) for a, b in zip(online, task.net.parameters(), strict=True))  # online untouched

