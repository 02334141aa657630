"""Building a net from its config and the data's shape: the one way every task (and the QAT loader) makes a net.

A model config is a `_partial_` Hydra config (`conf/model/*.yaml`); the shape keywords it lacks (`in_channels`,
`image_size`, `num_classes`, `vocab_size`, ...) come from the datamodule's `describe()`, so a net config never
repeats numbers that the data already knows.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from litforge.core.instantiate import call_partial
from litforge.models.meta import build_on_meta, building_on_meta

# keys that checkpoints written before `init_from` moved to the task group still carry in their net config: they
# are not constructor arguments of any net, so they are dropped here and old checkpoints keep loading
LEGACY_TASK_KEYS = ("init_from",)


def input_keywords(input_shape: list[int] | tuple[int, ...]) -> dict[str, Any]:
    """The shape keywords a net takes for one input sample: `in_channels` and `image_size` for an image [C, H, W],
    `num_features` for a feature vector [F] (`data=csv`)."""
    if len(input_shape) == 3:
        channels, height, width = input_shape
        return {"in_channels": channels, "image_size": (height, width)}
    if len(input_shape) == 1:
        return {"num_features": input_shape[0]}
    raise ValueError(f"input_shape {list(input_shape)}: expected [C, H, W] (images) or [F] (features)")


def build_net(net_cfg: dict[str, Any], **shape: object) -> nn.Module:
    """Instantiate a `_partial_` net config, completing it with the data's shape (in_channels, num_classes, ...)."""
    net_cfg = {k: v for k, v in net_cfg.items() if k not in LEGACY_TASK_KEYS}
    # a shape key the config sets itself wins (a preset's vocab_size, conf/model/gpt_7b.yaml): only what it lacks
    shape = {k: v for k, v in shape.items() if k not in net_cfg}

    if building_on_meta():  # strategy.meta_init under a sharding strategy: shapes only, filled after sharding
        return build_on_meta(lambda: call_partial("model", net_cfg, **shape))
    return call_partial("model", net_cfg, **shape)
