"""The task the jobs build from the composed config, and Lightning's refusal of a too-small `limit_*_batches` fraction
as one line (the command line's error report): each a ConfigError naming the key and the fix. Torch-free (the `tune=`
checks and the error report import it). The Trainer is built in litforge.runtime.devices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from litforge.core.errors import ConfigError
from litforge.core.instantiate import locate, to_plain, unexpected_argument, unknown_argument

if TYPE_CHECKING:
    import pytorch_lightning as pl


def task_class(cfg: DictConfig) -> type:
    """The LightningModule class `task._target_` names (before building it: its `data_kind` is checked first)."""
    target = cfg.task._target_
    try:
        return locate(target)
    except Exception:
        raise ConfigError(f"task._target_={target!r} cannot be imported; see conf/task/ for the options") from None


def build_task(cfg: DictConfig, shape: Mapping[str, Any]) -> pl.LightningModule:
    """The task's LightningModule, given plain-data configs for everything it builds itself."""
    task_cls = task_class(cfg)
    task_cfg = to_plain(cfg.task)
    target = task_cfg.pop("_target_")
    extra = {"loss": to_plain(cfg.loss)} if "loss" in cfg and cfg.loss else {}
    try:
        return task_cls(
            net=to_plain(cfg.model),
            optimizer=to_plain(cfg.optimizer),
            scheduler=to_plain(cfg.scheduler) or None,
            **extra,
            **shape,
            **task_cfg,
            run_config=to_plain(cfg),
        )
    except TypeError as exc:
        key = unexpected_argument(exc)
        if key is not None and key in task_cfg:
            raise unknown_argument("task", key, target) from None
        if key in ("num_classes", "num_targets") and key in shape:  # the data's target read as the other kind
            read, fix = ("classes", "task=classification") if key == "num_classes" else ("numbers", "task=regression")
            raise ConfigError(
                f"task._target_={target} does not take {key}: the data's target is read as {read}; pass {fix}, or "
                "(data=csv) data.target_kind=class or value to read it as the task predicts"
            ) from None
        raise ConfigError(f"could not build the task {target}: {exc}") from None


def too_few_batches(exc: BaseException) -> ConfigError | None:
    """Lightning's refusal of a `limit_*_batches` fraction that leaves a loader no batch, as one line naming the
    loader's size and the smallest fraction that gives one batch (None for any other exception).

    Only the built loaders know their length (a user's datamodule's too), so it is asked where Lightning asks it, in
    fit/test, and the numbers are read from Lightning's message (pytorch_lightning's `_parse_num_batches`).
    """
    found = re.search(r"check (\S+) of the `(\w+)_dataloader` but \S+ \* (\d+) < 1", str(exc))
    if type(exc).__name__ != "MisconfigurationException" or found is None:
        return None
    limit, stage, batches = found[1], found[2], int(found[3])
    key, digits = f"trainer.limit_{stage}_batches", 1 - math.floor(math.log10(1 / batches))
    least = min(math.ceil(10**digits / batches) / 10**digits, 1.0)  # 1/batches, rounded up to two digits
    data = {"train": "training", "val": "validation"}.get(stage, stage)
    return ConfigError(
        f"{key}={limit}: the {data} data is {batches} batch{'es' if batches > 1 else ''}, so {limit} of it is 0 "
        f"batches; pass a fraction >= {least:g} or a count of batches, e.g. {key}={least:g}"
    )
