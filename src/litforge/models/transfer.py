"""Head vs backbone of any litforge image net, and loading a backbone from another run's weights.

Transfer learning needs two facts about a net: which module is the classifier head (replaced when the class count
changes, trained first) and which modules are the backbone (loaded, frozen, unfrozen later). Rather than asking
every net to declare them, the head is found by a rule that fits all nets here: a `head_parameters()` method
(ResNet: `net.fc`), else a `head` attribute (CNN, ViT), else the last `nn.Linear` (MLP).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol, runtime_checkable

from torch import Tensor, nn

from litforge.core.errors import CheckpointError


@runtime_checkable
class HasHead(Protocol):
    """A net that names its classifier head's parameters itself (the head is not one `head` module or the last
    `nn.Linear`): what transfer learning replaces and BackboneFinetuning leaves trainable."""

    def head_parameters(self) -> Iterator[nn.Parameter]: ...


def head_name(net: nn.Module) -> str:
    """Dotted name of the classifier head module inside `net`."""
    if isinstance(net, HasHead):
        head = {id(p) for p in net.head_parameters()}
        for name, module in net.named_modules():
            own = {id(p) for p in module.parameters()}
            if own == head:
                return name
    if isinstance(dict(net.named_children()).get("head"), nn.Module):
        return "head"
    linears = [name for name, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"{type(net).__name__} has no nn.Linear head to replace")
    return linears[-1]


def backbone(net: nn.Module) -> nn.ModuleList:
    """Everything but the head, as a ModuleList of the head's siblings along its path (for BackboneFinetuning).

    For a head at `a.b.fc` that is: the other children of the net, of `a`, and of `b`. Parameters owned directly by
    an ancestor of the head (a ViT's `cls_token`, `pos_embed`) are in neither list and stay trainable throughout.
    """
    parts = head_name(net).split(".")
    siblings: list[nn.Module] = []
    module = net
    for part in parts:
        siblings += [child for name, child in module.named_children() if name != part]
        module = module.get_submodule(part)
    return nn.ModuleList(siblings)


def load_backbone(net: nn.Module, weights: Mapping[str, Tensor], source: str) -> list[str]:
    """Copy `weights` (the net's own state_dict keys) into `net`, keeping the fresh head where shapes differ.

    A shape mismatch is expected only in the head (another class count); anywhere else the checkpoint holds a
    different architecture and silently skipping those tensors would train a half-random net, so it is an error.
    Returns the names of the head tensors that were left freshly initialised.
    """
    head_prefix = head_name(net) + "."
    own = net.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    if missing or unexpected:
        raise CheckpointError(
            f"task.init_from={source} holds a different architecture: missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}; pass a checkpoint trained with the same model= and model.* settings"
        )
    kept_fresh, loadable = [], {}
    for key, tensor in weights.items():
        if tensor.shape == own[key].shape:
            loadable[key] = tensor
        elif key.startswith(head_prefix):
            kept_fresh.append(key)
        else:
            raise CheckpointError(
                f"task.init_from={source}: {key} has shape {tuple(tensor.shape)} in the checkpoint but "
                f"{tuple(own[key].shape)} here; only the head ({head_prefix[:-1]}) may differ. Use the same "
                "model= settings (width, depth) as the run that wrote the checkpoint"
            )
    net.load_state_dict({**own, **loadable})
    return kept_fresh
