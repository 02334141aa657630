"""One-switch speed options on the task's net: `compile=true|blocks`, `channels_last=true`.

Both act on the net in place, so parameter names (and therefore checkpoints, eval.py, predict.py and resume) are
exactly those of an uncompiled, default-layout run:

- `compile`: `nn.Module.compile()` compiles the module's forward in place. Unlike `net = torch.compile(net)` it adds
  no `OptimizedModule` wrapper, hence no `_orig_mod.` prefix in the state dict.
- `compile=blocks`: each unit the net declares in `fsdp_units()` (a GPT or ViT transformer block, a ResNet stage, a
  CNN block, an MLP layer) is compiled on its own, in place, as torchtitan compiles its blocks: identical blocks
  share one compiled graph (dynamo reuses it while the guards hold), so compile time grows with one block, not the
  depth, and each graph ends where FSDP2 gathers and activation checkpointing recomputes (both wrap the same
  units). The glue between units (embeddings, head, loss) runs eagerly. docs/performance.md has the figures.
- `channels_last`: NHWC weights, and a forward pre-hook that hands 4-D inputs to the net in NHWC too. It speeds up
  convolutions where the kernels prefer NHWC (GPUs with tensor cores, CPUs with bf16); measure before keeping it
  (benchmarks/hardware_use.py).

Other speed switches are one config key elsewhere: `steps_per_call=N` (litforge.loops.steps_per_call),
`trainer.precision=bf16-mixed` (Lightning), `data.on_device=true` (the datamodule), `callbacks=[default,ema]`
(Lightning's EMAWeightAveraging).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from litforge.core.contracts import Model
from litforge.core.errors import ConfigError


def apply_speed_options(
    net: nn.Module, compile: bool | str | Mapping[str, object] = False, channels_last: bool = False
) -> None:
    """Apply the configured switches to `net` (the plain nn.Module a litforge task trains)."""
    if channels_last:
        net.to(memory_format=torch.channels_last)
        net.register_forward_pre_hook(_to_channels_last)
    if compile == "blocks" or isinstance(compile, dict) and compile.get("blocks"):
        options = {k: v for k, v in compile.items() if k != "blocks"} if isinstance(compile, dict) else {}
        compile_blocks(net, **options)
    elif compile:
        options = dict(compile) if isinstance(compile, dict) else {}
        net.compile(**options)
        setattr(net, "litforge_compiled", True)  # noqa: B010  (nn.Module types its attributes as modules/tensors; read by is_compiled)


def sharding_units(net: nn.Module) -> list[nn.Module]:
    """The net's own `fsdp_units()` that hold parameters: what litforge.parallel.plans wraps with `fully_shard`
    before the root, and what `compile=blocks` compiles one by one (a model fact, so it lives below parallel)."""
    units = list(net.fsdp_units()) if isinstance(net, Model) else []
    return [unit for unit in units if any(True for _ in unit.parameters())]


def compile_blocks(net: nn.Module, **options: object) -> int:
    """Compile each of the net's `fsdp_units()` in place (`compile=blocks`, or `compile={blocks: true, ...}` with
    torch.compile options for every block); returns how many."""
    units = sharding_units(net)
    if not units:
        raise ConfigError(
            f"compile=blocks compiles the units a net declares in fsdp_units(), and {type(net).__name__} declares "
            "none: set compile=true (the whole net)"
        )
    # every in-place compiled module enters dynamo through one shared frame, whose cache then holds a graph per unit
    # shape and grad mode (training, evaluation's inference mode, the test after the best checkpoint is restored):
    # past torch's default of 8 a 3-shape MLP fell back to eager at its test, so each compile call allows them all
    shapes = {(type(u), tuple((n, p.shape, p.dtype) for n, p in u.named_parameters())) for u in units}
    options = {"recompile_limit": max(8, 4 * len(shapes)), **options}
    for unit in units:
        unit.compile(**options)
        setattr(unit, "litforge_compiled", True)  # noqa: B010  (see above)
    return len(units)


def is_compiled(net: nn.Module) -> bool:
    """Whether `compile=true` or `compile=blocks` compiled the net or any of its modules."""
    return any(getattr(m, "litforge_compiled", False) for m in net.modules())


def _to_channels_last(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return args
