"""One-switch speed options: `compile=true`, `channels_last=true` (on the task's net), `steps_per_call=N`.

Both act on the net in place, so parameter names (and therefore checkpoints, eval.py, predict.py and resume) are
exactly those of an uncompiled, default-layout run:

- `compile`: `nn.Module.compile()` compiles the module's forward in place. Unlike `net = torch.compile(net)` it adds
  no `OptimizedModule` wrapper, hence no `_orig_mod.` prefix in the state dict.
- `channels_last`: NHWC weights, and a forward pre-hook that hands 4-D inputs to the net in NHWC too. It speeds up
  convolutions where the kernels prefer NHWC (GPUs with tensor cores, CPUs with bf16); measure before keeping it
  (benchmarks/hardware_use.py).

- `steps_per_call`: N optimizer steps per Lightning training step (Keras' `steps_per_execution`), on one device.

Other speed switches are not here because they are already one config key elsewhere: `trainer.precision=bf16-mixed`
(Lightning), `data.on_device=true` (the datamodule), `callbacks=[default,ema]` (Lightning's EMAWeightAveraging).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from litforge.errors import ConfigError


def apply_speed_options(task: nn.Module, compile: bool | dict[str, Any] = False, channels_last: bool = False) -> None:
    """Apply the configured switches to `task.net` (the plain nn.Module a litforge task trains)."""
    net = getattr(task, "net", None)
    if not isinstance(net, nn.Module):
        if compile or channels_last:
            raise ConfigError(f"compile/channels_last act on the task's `net`, and {type(task).__name__} has none: "
                              "set compile=false channels_last=false")
        return
    if channels_last:
        net.to(memory_format=torch.channels_last)
        net.register_forward_pre_hook(_to_channels_last)
    if compile:
        options = dict(compile) if isinstance(compile, dict) else {}
        net.compile(**options)


def _to_channels_last(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return args


def use_steps_per_call(steps: Any, task: Any, datamodule: Any, trainer_kwargs: dict[str, Any], strategy: Any,
                       callbacks: list[Any]) -> None:
    """Let each Lightning training step run `steps` optimizer steps (see `LitforgeTask.use_steps_per_call`).

    Refuses, with the fix, the settings whose meaning would silently change: several devices (each step needs its
    own DDP forward), gradient accumulation, fp16 loss scaling and weight averaging (which Lightning applies per
    training step). Gradient clipping moves from the Trainer (which refuses it without automatic optimization)
    into the task's own step loop.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"steps_per_call={steps!r} must be a whole number >= 1 (1 = one optimizer step per "
                          "Lightning step, the default)")
    if steps == 1:
        return
    fix = "set steps_per_call=1"
    if not getattr(task, "supports_steps_per_call", False):
        raise ConfigError(f"steps_per_call={steps} is supported by task=classification only, not "
                          f"{type(task).__name__}: {fix}")
    if not hasattr(datamodule, "steps_per_call"):
        raise ConfigError(f"steps_per_call={steps} needs an image datamodule (data={type(datamodule).__name__} "
                          f"cannot batch several steps at once): {fix}")
    if strategy not in (None, "auto"):
        raise ConfigError(f"steps_per_call={steps} runs on one device, not with a strategy={strategy}: "
                          f"{fix} for multi-process training")
    if trainer_kwargs.get("accumulate_grad_batches", 1) != 1:
        raise ConfigError(f"steps_per_call={steps} and trainer.accumulate_grad_batches="
                          f"{trainer_kwargs['accumulate_grad_batches']} cannot be combined: raise data.batch_size "
                          f"instead, or {fix}")
    if str(trainer_kwargs.get("precision", "")).startswith("16"):
        raise ConfigError(f"steps_per_call={steps} does not do fp16 loss scaling: use trainer.precision=bf16-mixed "
                          f"or 32-true, or {fix}")
    from pytorch_lightning.callbacks import WeightAveraging

    averaging = [type(cb).__name__ for cb in callbacks if isinstance(cb, WeightAveraging)]
    if averaging:
        raise ConfigError(f"steps_per_call={steps}: {averaging[0]} averages once per Lightning step, i.e. every "
                          f"{steps} optimizer steps; drop the ema callback or {fix}")
    clip_val = trainer_kwargs.pop("gradient_clip_val", None)
    clip_algorithm = trainer_kwargs.pop("gradient_clip_algorithm", None) or "norm"
    if clip_algorithm not in ("norm", "value"):
        raise ConfigError(f"trainer.gradient_clip_algorithm={clip_algorithm!r} is not one of norm, value")
    task.use_steps_per_call(steps, datamodule.batch_size, clip_val, clip_algorithm)
    datamodule.steps_per_call = steps
