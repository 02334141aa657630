"""DQN: replay stream, Double DQN targets, hard and soft target updates, config and environment checks, and a short
training run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from litforge.core.errors import ConfigError
from litforge.data.gym import GymDataModule, ReplayBuffer, ReplayDraw


def test_replay_draws_sample_what_the_buffer_holds_when_consumed():
    data = GymDataModule(buffer_size=4, batch_size=50, steps_per_epoch=3)
    tickets = list(data.train_dataloader())
    assert len(tickets) == 3 and all(isinstance(t, ReplayDraw) for t in tickets)
    for i in range(6):  # added after the loader yielded; wraps around: only the last 4 remain
        data.buffer.add([i, i, i, i], action=i % 2, reward=float(i), next_obs=[i + 1] * 4, done=i == 5)
    obs, actions, rewards, next_obs, dones = data.on_before_batch_transfer(tickets[0], 0)
    assert obs.shape == (50, 4) and set(rewards.tolist()) == {2.0, 3.0, 4.0, 5.0}
    assert torch.equal(obs[:, 0], rewards) and data.on_before_batch_transfer(7, 0) == 7  # eval seeds pass through


def test_env_checks():
    with pytest.raises(ConfigError, match="discrete"):
        GymDataModule(env_id="Pendulum-v1")
    with pytest.raises(ConfigError, match="not a gymnasium environment"):
        GymDataModule(env_id="NoSuchEnv-v0")
    assert GymDataModule(env_id="Acrobot-v1").describe() == {"observation_size": 6, "num_actions": 3}


def test_short_dqn_run_learns_from_the_buffer(compose_cfg, tmp_path: Path):
    """A few hundred steps of the recipe (soft target updates here): epsilon and the lr decay, returns and loss are
    logged, the target net is not optimised and trails the online net."""
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "experiment=cartpole_dqn",
        "print_config=false",
        "logger=csv",
        "data.steps_per_epoch=150",
        "data.val_episodes=2",
        "data.test_episodes=2",
        "trainer.max_epochs=2",
        "task.warmup_steps=200",
        "task.target_sync_steps=10",
        "task.target_tau=0.5",
        "task.eps_decay_steps=250",
        "callbacks.progress_bar=null",
        "trainer.enable_progress_bar=false",
    )
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
    # the replay buffer travels in the checkpoint: 200 warm-up + 300 training transitions, restorable into a new run
    saved = ckpt["GymDataModule"]["replay_buffer"]
    assert (saved["size"], saved["pos"]) == (500, 500)
    restored = GymDataModule(buffer_size=cfg.data.buffer_size)
    restored.load_state_dict(ckpt["GymDataModule"])
    assert len(restored.buffer) == 500 and torch.equal(restored.buffer.obs[:500], saved["obs"])


def test_replay_buffer_state_round_trip_continues_the_same_samples():
    """Contents, ring position and the sampling generator come back: the restored buffer draws what the original
    draws next, and keeps writing at the same slot; a resume with another buffer size is refused, naming the key."""
    buffer = ReplayBuffer(capacity=8, observation_size=3, seed=5)
    for i in range(11):  # wrapped: pos 3
        buffer.add([i, -i, 2 * i], action=i % 2, reward=float(i), next_obs=[i + 1] * 3, done=i % 4 == 3)
    [buffer.sample_index() for _ in range(7)]  # the generator has moved on
    state = buffer.state_dict()
    copy = ReplayBuffer(capacity=8, observation_size=3, seed=0)
    copy.load_state_dict(state)
    assert [copy.sample_index() for _ in range(20)] == [buffer.sample_index() for _ in range(20)]
    for b in (buffer, copy):
        b.add([9, 9, 9], action=1, reward=9.0, next_obs=[0, 0, 0], done=False)
    for name in ("obs", "next_obs", "actions", "rewards", "dones"):
        assert torch.equal(getattr(copy, name), getattr(buffer, name)), name
    with pytest.raises(ConfigError, match="data.buffer_size=16"):
        ReplayBuffer(capacity=16, observation_size=3).load_state_dict(state)


def make_task(**kwargs):
    from litforge.tasks.dqn import DQNTask

    return DQNTask(
        net={"_target_": "litforge.models.qnet.QNetwork", "_partial_": True, "hidden_dims": [8]},
        optimizer={"_target_": "torch.optim.Adam", "_partial_": True},
        observation_size=4,
        num_actions=2,
        **kwargs,
    )


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


def test_env_state_round_trip_continues_the_same_episode():
    """A fresh CartPole put back where a saved one was mid-episode steps identically, down to its time limit; an env
    keeping no such state saves None and the resumed task starts a new episode, saying so in one line."""
    import logging
    from types import SimpleNamespace

    import gymnasium as gym
    import numpy as np

    from litforge.data.gym import env_state, load_env_state

    env = gym.make("CartPole-v1", max_episode_steps=40)
    env.reset(seed=3)
    for _ in range(5):
        env.step(1)
    saved = env_state(env)
    assert saved["elapsed_steps"] == 5
    saved = torch.load(_saved_to_bytes(saved), weights_only=True)  # plain data: loads as a checkpoint does
    copy = gym.make("CartPole-v1", max_episode_steps=40)
    copy.reset(seed=99)
    load_env_state(copy, saved)
    actions = [0, 1] * 30
    for name, e in (("original", env), ("copy", copy)):
        trace = []
        for a in actions:
            obs, reward, terminated, truncated, _ = e.step(a)
            trace.append((obs.tolist(), reward, terminated, truncated))
            if terminated or truncated:
                trace.append(e.reset()[0].tolist())  # np_random restored: the next episode starts alike too
                break
        if name == "original":
            expected = trace
    assert trace == expected and len(trace) > 2
    assert env_state(SimpleNamespace(unwrapped=SimpleNamespace(np_random=np.random.default_rng()))) is None

    task = make_task()
    task.env = SimpleNamespace(unwrapped=SimpleNamespace())
    task.obs = "fresh"
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("litforge.tasks.dqn")
    logger.addHandler(handler)
    # an in-process Hydra job earlier in this worker may have disabled existing loggers (its logging config's
    # disable_existing_loggers) or raised their level: the line is the task's, so listen to it as a fresh run does
    disabled, level = logger.disabled, logger.level
    logger.disabled, logger.level = False, logging.INFO
    try:
        task.restore_acting(
            {
                "env": None,
                "obs": None,
                "episode_return": 3.0,
                "env_steps": 7,
                "explore": torch.Generator().manual_seed(1).get_state(),
            }
        )
    finally:
        logger.removeHandler(handler)
        logger.disabled, logger.level = disabled, level
    assert task.obs == "fresh" and task.env_steps == 7
    assert [r.getMessage() for r in records] == [
        "DQN resume: SimpleNamespace keeps no state litforge can save; the training env starts a new episode"
    ]


def _saved_to_bytes(obj):
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer
