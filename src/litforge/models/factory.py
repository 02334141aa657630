"""Building a net from its config and the data's shape: the one way every task (and the QAT loader) makes a net.

A model config is a `_partial_` Hydra config (`conf/model/*.yaml`); the shape keywords it lacks (`in_channels`,
`image_size`, `num_classes`, `vocab_size`, ...) come from the datamodule's `describe()`, so a net config never
repeats numbers that the data already knows.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from litforge.errors import ConfigError
from litforge.instantiate import call_partial

# keys that checkpoints written before `init_from` moved to the task group still carry in their net config: they
# are not constructor arguments of any net, so they are dropped here and old checkpoints keep loading
LEGACY_TASK_KEYS = ("init_from",)


def build_net(net_cfg: dict[str, Any], **shape: Any) -> nn.Module:
    """Instantiate a `_partial_` net config, completing it with the data's shape (in_channels, num_classes, ...)."""
    net_cfg = {k: v for k, v in net_cfg.items() if k not in LEGACY_TASK_KEYS}
    try:
        return call_partial(net_cfg, **shape)
    except Exception as exc:  # hydra wraps constructor errors; surface a user error as itself
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause from None
        if isinstance(cause, TypeError) and "unexpected keyword argument" in str(cause):
            # e.g. model=gpt under the image classification task: the net does not take this data's shape
            target = net_cfg.get("_target_", "?")
            raise ConfigError(f"model {target} cannot be built from {sorted(shape)} ({cause}): it belongs to another "
                              "task and data kind; pick a matching set, e.g. an experiment= recipe") from None
        raise
