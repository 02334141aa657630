"""A gymnasium environment as a datamodule: its replay buffer, streamed to the learner through an IterableDataset.

Reinforcement learning has no fixed dataset: the agent (the DQN task) writes transitions into `self.buffer` as it
acts, and the training loader yields tickets (`ReplayDraw`) that become minibatches sampled from whatever the buffer
holds when the step consumes them. Validation and test "batches" are episode numbers: the task plays one greedy
episode per item.

Any environment with a discrete action space and a vector observation works: `data.env_id=Acrobot-v1`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from litforge.core.bounds import Count, Seed
from litforge.core.errors import ConfigError
from litforge.runtime import compat

if TYPE_CHECKING:
    import gymnasium as gym

Transition = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]  # obs, action, reward, next_obs, done


class ReplayBuffer:
    """A fixed-size ring buffer of transitions in preallocated tensors (uniform sampling, seeded)."""

    def __init__(self, capacity: int, observation_size: int, seed: int = 0) -> None:
        self.capacity, self.size, self.pos = capacity, 0, 0
        self.obs = torch.zeros(capacity, observation_size)
        self.next_obs = torch.zeros(capacity, observation_size)
        self.actions = torch.zeros(capacity, dtype=torch.int64)
        self.rewards = torch.zeros(capacity)
        self.dones = torch.zeros(capacity)
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        i = self.pos
        self.obs[i] = torch.as_tensor(obs, dtype=torch.float32)
        self.next_obs[i] = torch.as_tensor(next_obs, dtype=torch.float32)
        self.actions[i], self.rewards[i], self.dones[i] = action, reward, float(done)
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample_index(self) -> int:
        return int(torch.randint(self.size, (1,), generator=self.generator))

    def sample(self, batch_size: int) -> Transition:
        """A minibatch of `batch_size` transitions drawn uniformly (with replacement) from what the buffer holds."""
        i = torch.randint(self.size, (batch_size,), generator=self.generator)
        return self.obs[i], self.actions[i], self.rewards[i], self.next_obs[i], self.dones[i]

    def __getitem__(self, i: int) -> Transition:
        return self.obs[i], self.actions[i], self.rewards[i], self.next_obs[i], self.dones[i]

    def tensors(self) -> dict[str, Tensor]:
        return {
            "obs": self.obs,
            "next_obs": self.next_obs,
            "actions": self.actions,
            "rewards": self.rewards,
            "dones": self.dones,
        }

    def state_dict(self) -> dict[str, Any]:
        """The filled part of the buffer, its write position and its sampling generator (tensors and ints only, so
        checkpoints load under `weights_only=True`)."""
        n = self.size
        return {
            "capacity": self.capacity,
            "size": n,
            "pos": self.pos,
            **{name: tensor[:n].clone() for name, tensor in self.tensors().items()},
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["capacity"] != self.capacity or state["obs"].shape[1:] != self.obs.shape[1:]:
            raise ConfigError(
                f"the checkpoint's replay buffer holds {state['capacity']} transitions of "
                f"{tuple(state['obs'].shape[1:])} observations; this run's data.buffer_size="
                f"{self.capacity} with {tuple(self.obs.shape[1:])}: resume with the run's own "
                f"data.buffer_size={state['capacity']} and data.env_id"
            )
        n = self.size = int(state["size"])
        self.pos = int(state["pos"])
        for name, tensor in self.tensors().items():
            tensor[:n] = state[name]
        self.generator.set_state(state["generator"])


class ReplayDraw:
    """A ticket for one minibatch of `size` transitions, turned into one by `GymDataModule.on_before_batch_transfer`.

    A loader may fetch ahead (Lightning's fit loop does for a loader without a length, DataLoader workers always
    do); a minibatch drawn at fetch time is drawn before the previous step has acted, and is lost from a mid-epoch
    checkpoint (the resumed run draws it again from a buffer that moved on). Drawing when the batch is consumed, just
    before it goes to the device, keeps every draw inside the step that uses it, whatever the fetching policy.
    """

    def __init__(self, size: int) -> None:
        self.size = size


class ReplayDraws(IterableDataset):
    """`length` tickets (`ReplayDraw`) for minibatches of `batch_size`: the training loader of `GymDataModule`."""

    def __init__(self, length: int, batch_size: int) -> None:
        self.length, self.batch_size = length, batch_size

    def __iter__(self) -> Iterator[ReplayDraw]:
        return (ReplayDraw(self.batch_size) for _ in range(self.length))

    def __len__(self) -> int:
        return self.length


@runtime_checkable
class ArrayStateEnv(Protocol):
    """An env whose position is its `state` array and its `np_random` (gymnasium's classic control)."""

    state: np.ndarray
    np_random: np.random.Generator


@runtime_checkable
class CountsPastTheEnd(Protocol):
    steps_beyond_terminated: int | None  # CartPole's steps after the end (it warns once)


def env_state(env: gym.Env) -> dict[str, Any] | None:
    """`env`'s position mid-episode as plain data (tensors, ints, dicts: checkpoints load with `weights_only=True`),
    or None for an env that keeps its state in another form.

    gymnasium has no state save for environments (pickling is not allowed in checkpoints); its classic-control envs
    (CartPole, Acrobot, MountainCar) keep it all in `unwrapped.state` (a numpy array), `unwrapped.np_random` and,
    for CartPole, `steps_beyond_terminated`, plus the TimeLimit wrapper's step count (litforge.runtime.compat).
    """
    inner = env.unwrapped
    if not isinstance(inner, ArrayStateEnv) or not isinstance(inner.state, np.ndarray):
        return None
    saved: dict[str, Any] = {
        "state": torch.from_numpy(inner.state.copy()),
        "dtype": str(inner.state.dtype),
        "np_random": inner.np_random.bit_generator.state,
    }
    if isinstance(inner, CountsPastTheEnd):
        saved["steps_beyond_terminated"] = inner.steps_beyond_terminated
    elapsed = compat.time_limit_elapsed(env)
    if elapsed is not None:
        saved["elapsed_steps"] = elapsed
    return saved


def load_env_state(env: gym.Env, saved: dict[str, Any]) -> None:
    """Put an `env` made and reset afresh back where `env_state` found the saved one."""
    inner = env.unwrapped
    if not isinstance(inner, ArrayStateEnv):
        raise ConfigError(f"{type(inner).__name__} keeps no `state` array: its saved position cannot be restored")
    inner.state = saved["state"].numpy().astype(saved["dtype"])
    inner.np_random.bit_generator.state = saved["np_random"]
    if isinstance(inner, CountsPastTheEnd) and "steps_beyond_terminated" in saved:
        inner.steps_beyond_terminated = saved["steps_beyond_terminated"]
    if "elapsed_steps" in saved:
        compat.set_time_limit_elapsed(env, saved["elapsed_steps"])


class GymDataModule(pl.LightningDataModule):
    """A gymnasium environment, its replay buffer and the loaders; `describe()` gives the net its sizes."""

    kind = "rl"

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        batch_size: Count = 64,
        buffer_size: Count = 100_000,
        steps_per_epoch: Count = 1000,
        val_episodes: Count = 10,
        test_episodes: Count = 100,
        seed: Seed = 0,
    ) -> None:
        super().__init__()
        self.env_id, self.batch_size, self.steps_per_epoch = env_id, batch_size, steps_per_epoch
        self.val_episodes, self.test_episodes, self.seed = val_episodes, test_episodes, seed
        env = self.make_env()
        space, obs_space = env.action_space, env.observation_space
        env.close()
        import gymnasium as gym  # extra [rl]

        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(
                f"data.env_id={env_id} has a {type(space).__name__} action space; DQN needs a discrete "
                "one (e.g. CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3)"
            )
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ConfigError(
                f"data.env_id={env_id} observations are {obs_space}; this DQN needs a vector (1-D Box) observation"
            )
        self.observation_size, self.num_actions = int(obs_space.shape[0]), int(space.n)
        self.buffer = ReplayBuffer(buffer_size, self.observation_size, seed)

    def make_env(self) -> gym.Env:
        import gymnasium as gym  # extra [rl]

        try:
            return gym.make(self.env_id)
        except gym.error.Error as exc:
            raise ConfigError(
                f"data.env_id={self.env_id} is not a gymnasium environment this machine can make "
                f"({exc}); e.g. data.env_id=CartPole-v1"
            ) from None

    # Lightning stores these in every checkpoint and hands them back on resume (before `on_fit_start`, so the
    # task's warm-up finds the buffer full and does not refill it with random actions)
    def state_dict(self) -> dict[str, Any]:
        return {"replay_buffer": self.buffer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "replay_buffer" in state_dict:
            self.buffer.load_state_dict(state_dict["replay_buffer"])

    def describe(self) -> dict[str, Any]:
        return {"observation_size": self.observation_size, "num_actions": self.num_actions}

    def train_dataloader(self) -> DataLoader:
        # tickets, not transitions: the minibatch is drawn when consumed (ReplayDraw says why)
        return DataLoader(ReplayDraws(self.steps_per_epoch, self.batch_size), batch_size=None)

    def on_before_batch_transfer(self, batch: object, dataloader_idx: int) -> object:
        """Lightning calls this on the batch the loop is about to train on (not the one it prefetched)."""
        return self.buffer.sample(batch.size) if isinstance(batch, ReplayDraw) else batch

    def val_dataloader(self) -> DataLoader:
        # episode seeds far from the training seeds; one episode per item
        # an array is a map-style dataset (len, getitem)
        return DataLoader(np.arange(self.val_episodes) + 10_000 + self.seed, batch_size=None)  # type: ignore[arg-type]

    def test_dataloader(self) -> DataLoader:
        # an array is a map-style dataset (len, getitem)
        return DataLoader(np.arange(self.test_episodes) + 20_000 + self.seed, batch_size=None)  # type: ignore[arg-type]
