"""Where a dataset lives: held in host memory or streamed (`data.max_in_memory_mb`), and on the GPU or the host
(`data.on_device` = auto (default) | true | false).

Held on the GPU, batches are slices of device tensors: no host-to-device copy per batch, no loader. That pays when
the dataset is small next to the device's memory, and must not take memory the model and activations need, so
`auto` holds it there only on a CUDA device and only when all its splits together take less than `AUTO_SHARE` of the
device's free memory (`torch.cuda.mem_get_info`, measured when the first loader is built). `true` forces it (any
accelerator), `false` keeps it on the host; a CPU run keeps it on the host whatever the setting.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

import torch
from torch import Tensor

from litforge.core.errors import ConfigError

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
    log.info(
        "data.on_device=auto: the dataset (%.1f MB) %s on %s (%.1f GB free; the limit is %d%% of it)",
        nbytes / 2**20,
        "is held" if fits else "stays on the host, too big to hold",
        device,
        free / 2**30,
        round(AUTO_SHARE * 100),
    )
    return fits


HOST_SHARE = 0.25  # at most this fraction of the host's available memory goes to a decoded dataset (per node)


def host_memory_available() -> int:
    """Bytes of host memory available now: Linux's MemAvailable (free + reclaimable page cache), else free pages.

    Read here rather than through psutil, which litforge does not depend on."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_in_memory_limit(setting: float | str) -> None:
    if setting == "auto" or (isinstance(setting, (int, float)) and not isinstance(setting, bool) and setting >= 0):
        return
    raise ConfigError(
        f"data.max_in_memory_mb={setting!r}: expected auto (a quarter of the available host memory) "
        f"or a size in MB >= 0, e.g. data.max_in_memory_mb=4096 (0 always streams)"
    )


def hold_in_memory(setting: float | str, nbytes: int, ranks_per_node: int = 1) -> bool:
    """Whether a dataset of `nbytes` (decoded, uint8) is decoded once and held in memory under
    `data.max_in_memory_mb=<setting>`; otherwise it is streamed from disk.

    `auto` follows benchmarks/loader_throughput.py: slicing decoded tensors beat every streamed path there (files with
    0-2 workers, PIL or torchvision, LitData shards), and decoding once costs about one streamed epoch, so holding
    the data pays from the second epoch whenever it fits. It fits when it takes under HOST_SHARE of the available
    host memory, shared by the `ranks_per_node` processes that each hold a copy (DDP).
    """
    check_in_memory_limit(setting)
    if setting != "auto":
        return nbytes <= float(setting) * 2**20
    available = host_memory_available()
    fits = nbytes < HOST_SHARE * available / max(1, ranks_per_node)
    log.info(
        "data.max_in_memory_mb=auto: the decoded dataset (%.1f MB) %s (%.1f GB available, %d process(es) per "
        "node; the limit is %d%% of it)",
        nbytes / 2**20,
        "is held in memory" if fits else "is streamed from disk",
        available / 2**30,
        ranks_per_node,
        round(HOST_SHARE * 100),
    )
    return fits
