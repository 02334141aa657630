"""DQN: replay stream, epsilon schedule, target sync, environment checks, and a short training run."""

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
    """A few hundred steps: epsilon decays, the target net follows the online net, returns and loss are logged."""
    from litforge.train import train

    cfg = compose_cfg("experiment=cartpole_dqn", "print_config=false", "logger=csv", "data.steps_per_epoch=150",
                      "data.val_episodes=2", "data.test_episodes=2", "trainer.max_epochs=2", "task.warmup_steps=200",
                      "task.target_sync_steps=100", "task.eps_decay_steps=400", "callbacks.progress_bar=null",
                      "trainer.enable_progress_bar=false")
    result = train(cfg)
    m = result["metrics"]
    assert m["train/epsilon"] == pytest.approx(0.04)  # 200 warm-up + 600 env steps > 400: fully decayed
    assert "train/episode_return" in m and m["test/return"] >= 8 and "val/return" in m
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    online = [k for k in ckpt["state_dict"] if k.startswith("net.")]
    assert len(ckpt["optimizer_states"][0]["param_groups"][0]["params"]) == len(online)  # target net not optimised


def test_target_net_syncs_every_n_steps():
    from litforge.tasks.dqn import DQNTask

    task = DQNTask(net={"_target_": "litforge.models.qnet.QNetwork", "_partial_": True, "hidden_dims": [8]},
                   optimizer={"_target_": "torch.optim.Adam", "_partial_": True}, observation_size=4, num_actions=2,
                   target_sync_steps=100)
    with torch.no_grad():
        task.net.net[0].weight.add_(1.0)
    assert not task.maybe_sync_target(99)
    assert not torch.equal(task.net.net[0].weight, task.target_net.net[0].weight)
    assert task.maybe_sync_target(200)
    assert torch.equal(task.net.net[0].weight, task.target_net.net[0].weight)
    assert not any(p.requires_grad for p in task.target_net.parameters())
