"""Deep Q-learning (Mnih et al. 2015) on a gymnasium environment (`data=cartpole`, any discrete-action env).

Each training step first acts in the environment (`env_steps_per_step` epsilon-greedy steps into the replay
buffer), then takes one gradient step on a minibatch the datamodule's IterableDataset drew from that buffer:
TD target `r + gamma * max_a' Q_target(s', a')`, or with `double_dqn` (van Hasselt et al. 2016)
`r + gamma * Q_target(s', argmax_a' Q_online(s', a'))`, from a target network that every `target_sync_steps` moves
`target_tau` of the way to the online net (1.0: a hard copy; e.g. 0.005 every step: Polyak averaging), a Huber loss
(`loss=huber`), and gradient clipping via `trainer.gradient_clip_val`. Validation and test play greedy episodes and
log the mean return (`val/return`, `test/return`); `train/episode_return` is logged as training episodes end.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor, nn

from litforge.core.bounds import Count, NonNegativeInt, UnitInterval
from litforge.core.errors import ConfigError
from litforge.data.gym import env_state, load_env_state
from litforge.models.nets import build_net
from litforge.runtime.host_reads import host_scalar
from litforge.tasks.task import LitforgeTask, build_loss

REGRESSION_LOSSES = ("HuberLoss", "SmoothL1Loss", "MSELoss", "L1Loss")
ACTING_KEY = "litforge_dqn_acting"  # extra checkpoint entry: the training env mid-episode and the exploration RNG

log = logging.getLogger(__name__)


class DQNTask(LitforgeTask):
    data_kind = "rl"

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        observation_size: int,
        num_actions: int,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        gamma: UnitInterval = 0.99,  # the discount
        target_sync_steps: Count = 500,
        target_tau: Annotated[float, Field(gt=0, le=1)] = 1.0,  # 1 = copy the online net, < 1 = Polyak averaging
        double_dqn: bool = False,
        warmup_steps: NonNegativeInt = 1000,
        env_steps_per_step: Count = 1,
        eps_start: UnitInterval = 1.0,
        eps_end: UnitInterval = 0.05,
        eps_decay_steps: NonNegativeInt = 10_000,
        lr_scaling: Literal["none", "linear", "sqrt"] = "none",
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config, lr_scaling=lr_scaling)
        self.save_hyperparameters(ignore=["run_config"])
        # the ranges of gamma, target_tau, target_sync_steps, ... are checked by litforge.config.check (task.*)
        if loss and not str(loss.get("_target_", "")).endswith(REGRESSION_LOSSES):
            raise ConfigError(
                f"task=dqn regresses Q-values and needs a regression loss, not {loss.get('_target_')}: "
                "use loss=huber (experiment=cartpole_dqn sets it)"
            )
        self.net = build_net(net, observation_size=observation_size, num_actions=num_actions)
        self.target_net = copy.deepcopy(self.net).requires_grad_(False)  # frozen: never reaches the optimizer
        self.loss_fn: nn.Module = build_loss(loss, nn.HuberLoss)
        self.env: Any = None
        self.obs: Any = None
        self.episode_return = 0.0
        self.env_steps = 0
        # exploration's own generator (seeded from data.seed at fit start, saved in checkpoints): the global RNG is
        # saved too (tasks/task.py), but other code draws from it between a checkpoint and the step after it (the
        # DataLoader's iterator takes a seed from it when a resumed epoch restarts), so it would not resume exactly
        self.explore = torch.Generator()
        self._resumed_acting: dict[str, Any] | None = None

    def forward(self, observations: Tensor) -> Tensor:
        return self.net(observations)

    # ---- acting ---------------------------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """Linear decay over the env steps taken after warm-up; from global_step, so a resumed run continues it."""
        h = self.hparams
        fraction = min(1.0, self.global_step * h.env_steps_per_step / max(1, h.eps_decay_steps))
        return h.eps_start + fraction * (h.eps_end - h.eps_start)

    def act(self, obs: np.ndarray, epsilon: float) -> int:
        # greedy play (epsilon 0: evaluation) draws nothing, so it leaves the training exploration stream alone
        if epsilon > 0 and torch.rand((), generator=self.explore) < epsilon:
            return int(torch.randint(self.hparams.num_actions, (), generator=self.explore))
        with torch.no_grad():
            q = self.net(torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0))
        return int(q.argmax(dim=-1))

    def _gym_data(self) -> Any:
        """The trainer's datamodule: the replay buffer, the env factory and the seed live there."""
        return self.trainer.datamodule  # type: ignore[attr-defined]  # Lightning sets it without declaring it

    def env_step(self, epsilon: float) -> float | None:
        """One step in the training env into the replay buffer; the episode's return when it just ended."""
        action = self.act(self.obs, epsilon)
        next_obs, reward, terminated, truncated, _ = self.env.step(action)
        # a time-limit truncation is not a terminal state: keep bootstrapping from next_obs
        self._gym_data().buffer.add(self.obs, action, float(reward), next_obs, terminated)
        self.env_steps += 1
        self.episode_return += float(reward)
        self.obs = next_obs
        if terminated or truncated:
            finished, self.episode_return = self.episode_return, 0.0
            self.obs, _ = self.env.reset()
            return finished
        return None

    def on_fit_start(self) -> None:
        datamodule = self._gym_data()
        self.env = datamodule.make_env()
        self.obs, _ = self.env.reset(seed=datamodule.seed)
        self.env.action_space.seed(datamodule.seed)
        self.explore.manual_seed(datamodule.seed)
        while len(datamodule.buffer) < max(self.hparams.warmup_steps, datamodule.batch_size):
            self.env_step(epsilon=1.0)  # random actions fill the buffer before the first update
        self.episode_return, self.obs = 0.0, self.env.reset()[0]
        if self._resumed_acting is not None:  # a resumed run: back to the interrupted episode (on_load_checkpoint)
            self.restore_acting(self._resumed_acting)
            self._resumed_acting = None

    # ---- exact resume: the acting state travels in the checkpoint (weights_only-safe plain data) -------------------
    def acting_state(self) -> dict[str, Any]:
        """The training env mid-episode (None for an env `env_state` cannot read), its observation, the episode's
        return so far, the env step count and the exploration generator."""
        return {
            "env": None if self.env is None else env_state(self.env),
            "obs": torch.tensor(self.obs) if self.obs is not None else None,  # a copy
            "episode_return": self.episode_return,
            "env_steps": self.env_steps,
            "explore": self.explore.get_state(),
        }

    def restore_acting(self, saved: dict[str, Any]) -> None:
        self.explore.set_state(saved["explore"])
        self.env_steps = int(saved["env_steps"])
        if saved["env"] is None or saved["obs"] is None:
            log.warning(
                "DQN resume: %s keeps no state litforge can save; the training env starts a new episode",
                type(self.env.unwrapped).__name__ if self.env is not None else "the env",
            )
            return
        load_env_state(self.env, saved["env"])
        self.obs, self.episode_return = saved["obs"].numpy(), float(saved["episode_return"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[ACTING_KEY] = self.acting_state()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._resumed_acting = checkpoint.get(ACTING_KEY)  # applied in on_fit_start, once the env exists

    def on_fit_end(self) -> None:
        if self.env is not None:
            self.env.close()

    # ---- learning -------------------------------------------------------------------------------------------------
    def training_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        for _ in range(self.hparams.env_steps_per_step):
            finished = self.env_step(self.epsilon)
            if finished is not None:
                self.log("train/episode_return", host_scalar(finished), on_step=True, on_epoch=False, prog_bar=True)
        obs, actions, rewards, next_obs, dones = batch
        q = self.net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = self.loss_fn(q, self.td_target(rewards, next_obs, dones))
        if self.logs_this_step():  # only the steps Lightning writes: each `self.log` costs ~600 Python calls
            # one device->host read for both values, logged as host tensors (litforge.runtime.host_reads)
            loss_value, q_mean = torch.stack([loss.detach(), q.detach().mean()]).tolist()
            self.log("train/loss", host_scalar(loss_value), on_step=True, on_epoch=False, prog_bar=True)
            self.log("train/q_mean", host_scalar(q_mean), on_step=True, on_epoch=False)  # ~1/(1-gamma) if balanced
            self.log("train/epsilon", host_scalar(self.epsilon), on_step=True, on_epoch=False)
        return loss

    @torch.no_grad()
    def td_target(self, rewards: Tensor, next_obs: Tensor, dones: Tensor) -> Tensor:
        """`r + gamma * (1 - done) * Q_target(s', a*)`; a* = argmax of the target net, or of the online net (double)."""
        next_q = self.target_net(next_obs)
        if self.hparams.double_dqn:
            best = self.net(next_obs).argmax(dim=1, keepdim=True)
            next_value = next_q.gather(1, best).squeeze(1)
        else:
            next_value = next_q.max(dim=1).values
        return rewards + self.hparams.gamma * (1.0 - dones) * next_value

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        super().on_train_batch_start(batch, batch_idx)
        # the sync due after step N runs before step N+1, not in on_train_batch_end: Lightning runs callbacks' batch-
        # end hooks (ModelCheckpoint's save) before the module's, so a checkpoint at step N would miss that sync
        if self.global_step:
            self.maybe_sync_target(self.global_step)

    def maybe_sync_target(self, step: int) -> bool:
        """Every `target_sync_steps` gradient steps: target <- tau * online + (1 - tau) * target (tau=1: a copy)."""
        if step % self.hparams.target_sync_steps:
            return False
        tau = float(self.hparams.target_tau)
        with torch.no_grad():
            if tau == 1.0:
                self.target_net.load_state_dict(self.net.state_dict())
            else:
                for t_param, o_param in zip(self.target_net.parameters(), self.net.parameters(), strict=True):
                    t_param.lerp_(o_param, tau)
                for t_buf, o_buf in zip(self.target_net.buffers(), self.net.buffers(), strict=True):
                    t_buf.copy_(o_buf)  # running statistics, if any, are copied rather than averaged
        return True

    # ---- evaluation: greedy episodes ------------------------------------------------------------------------------
    def play_episode(self, seed: int) -> float:
        env = self._gym_data().make_env()
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(self.act(obs, epsilon=0.0))
            total += float(reward)
            done = terminated or truncated
        env.close()
        return total

    def validation_step(self, seed: Tensor, batch_idx: int) -> None:
        self.log("val/return", self.play_episode(int(seed)), on_epoch=True, prog_bar=True, batch_size=1, sync_dist=True)

    def test_step(self, seed: Tensor, batch_idx: int) -> None:
        ret = self.play_episode(int(seed))
        self.log("test/return", ret, on_epoch=True, batch_size=1, sync_dist=True)
        self.log("test/solved_fraction", float(ret >= 475.0), on_epoch=True, batch_size=1, sync_dist=True)
