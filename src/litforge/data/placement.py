"""Where an in-memory dataset lives: `data.on_device` = auto (default) | true | false.

Held on the GPU, batches are slices of device tensors: no host-to-device copy per batch, no loader. That pays when
the dataset is small next to the device's memory, and must not take memory the model and activations need, so
`auto` holds it there only on a CUDA device and only when all its splits together take less than `AUTO_SHARE` of the
device's free memory (`torch.cuda.mem_get_info`, measured when the first loader is built). `true` forces it (any
accelerator), `false` keeps it on the host; a CPU run keeps it on the host whatever the setting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import Tensor

from litforge.errors import ConfigError

log = logging.getLogger(__name__)

AUTO_SHARE = 0.25  # at most this fraction of the free device memory goes to the dataset under `auto`


def dataset_bytes(splits: Iterable[Iterable[Tensor]]) -> int:
    return sum(t.numel() * t.element_size() for tensors in splits for t in tensors)


def hold_on_device(setting: bool | str, nbytes: int, device: torch.device) -> bool:
    """Whether a dataset of `nbytes` goes to `device` under `data.on_device=<setting>`."""
    if device.type == "cpu" or setting is False or setting == "false":
        return False
    if setting is True or setting == "true":
        return True
    if setting != "auto":
        raise ConfigError(f"data.on_device={setting!r}: expected one of auto, true, false, e.g. data.on_device=auto")
    if device.type != "cuda":
        return False  # auto measures CUDA memory only; data.on_device=true forces other accelerators
    free, _total = torch.cuda.mem_get_info(device)
    fits = nbytes < AUTO_SHARE * free
    log.info("data.on_device=auto: the dataset (%.1f MB) %s on %s (%.1f GB free; the limit is %d%% of it)",
             nbytes / 2**20, "is held" if fits else "stays on the host, too big to hold", device, free / 2**30,
             round(AUTO_SHARE * 100))
    return fits
