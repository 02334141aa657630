"""`float8=tensorwise|rowwise`: the net's Linear layers trained with float8 matmuls through torchao.

What torchtitan's float8 converter does, on litforge's nets: `torchao.float8.convert_to_float8_training` swaps each
chosen `nn.Linear` for a `Float8Linear` (a subclass: same `weight` / `bias` parameters, so state-dict names,
checkpoints, eval.py and the tied GPT head stay as they are) whose forward and backward matmuls cast their inputs to
float8 with dynamic scales (`tensorwise`: one scale per tensor, fastest; `rowwise`: one per row, closer to bf16).
Weights, optimizer state and the master copy stay in their own dtype; combine with `trainer.precision=bf16-mixed`.

Which layers: as torchtitan filters them, a Linear whose in and out features are both multiples of 16 (the float8
GEMM's shape rule; others would fail or pad) and not the net's last Linear (its output layer: the logits stay in
full precision). The GPT's attention and MLP projections are converted, its head is not; an MLP's hidden layers are.

With FSDP2 (`strategy=fsdp|fsdp_tp|hsdp`, data-parallel size above 1) and `tensorwise`, the weights are all-gathered
in float8 (torchao's `enable_fsdp_float8_all_gather`: half the bytes of bf16), as torchtitan enables it. The
conversion runs before activation checkpointing, sharding and `compile` (torchtitan's order), on the meta net too.

Float8 matmuls need a CUDA GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell): anything else is refused
in one line before the run folder exists (litforge.cli.preflight asks :func:`float8_refusal`).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from litforge.core.errors import ConfigError
from litforge.runtime.extras import installed

RECIPES = ("tensorwise", "rowwise")  # the `float8` key's values besides none (torchao's recipe names)
MIN_CAPABILITY = (8, 9)


def float8_refusal(recipe: str, accelerator: object = None) -> str | None:
    """Why `float8=<recipe>` cannot run here (one line), or None when it can. Imports torch only when the trainer
    does not say cpu."""
    fix = "pass float8=none (trainer.precision=bf16-mixed is the fast dtype there)"
    needs = (
        f"float8={recipe} trains with float8 matmuls, which need a CUDA GPU of compute capability >= 8.9 "
        "(L4, H100 or newer)"
    )
    if str(accelerator) == "cpu":
        return f"{needs}; trainer.accelerator=cpu: {fix}"

    if not torch.cuda.is_available():
        return f"{needs}; this machine has no CUDA GPU: {fix}"
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name()
        return f"{needs}; this {name} has {capability[0]}.{capability[1]}: {fix}"

    if not installed("torchao"):
        return f"float8={recipe} needs torchao, not installed: it comes with litforge's `deploy` extra; or {fix}"
    return None


def float8_layers(net: nn.Module) -> list[str]:
    """The names of the Linear layers `float8` converts (see the module docstring for the rule)."""
    linears = [(name, m) for name, m in net.named_modules() if type(m) is nn.Linear]
    last = linears[-1][0] if linears else None
    return [name for name, m in linears if name != last and m.in_features % 16 == 0 and m.out_features % 16 == 0]


def convert_to_float8(net: nn.Module, recipe: str, fsdp_all_gather: bool = False) -> list[str]:
    """Swap the net's chosen Linear layers for torchao's Float8Linear in place; returns their names. Builds on any
    device (meta included); the refusal of machines without float8 matmuls is :func:`float8_refusal`'s."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # extra [deploy]

    if recipe not in RECIPES:
        raise ConfigError(f"float8={recipe}: expected one of none, {', '.join(RECIPES)}, e.g. float8=tensorwise")
    chosen = set(float8_layers(net))
    if not chosen:
        raise ConfigError(
            f"float8={recipe} found no Linear layer of {type(net).__name__} with both sizes multiples of 16 besides "
            "its output layer: widen the model (e.g. model.dim=256) or pass float8=none"
        )
    config = Float8LinearConfig.from_recipe_name(recipe)
    if fsdp_all_gather and recipe == "tensorwise":  # torchao offers float8 all-gather for tensorwise scales only
        config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
    convert_to_float8_training(net, config=config, module_filter_fn=lambda module, fqn: fqn in chosen)
    return sorted(chosen)
