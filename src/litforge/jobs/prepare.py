"""The prepare job: any image datamodule → LitData shards that `data=streaming` trains from.

    python prepare.py data=mnist output=data/streaming/mnist      # or output=s3://bucket/mnist

The datamodule is built exactly as `train.py` builds it (same config group, same checks), so the shards hold the
very train/val/test split and normalisation a `data=<dm>` run would use; the writing is litforge.data.streaming's.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig

from litforge.config.settings import Prepare, job_settings
from litforge.core.instantiate import instantiate_group
from litforge.data.streaming import write_shards
from litforge.jobs.checks import check_at_start


def prepare(cfg: DictConfig) -> dict[str, Any]:
    """Write the shards and the facts file; returns the sample counts (shown in the summary)."""
    check_at_start(cfg, "prepare")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Prepare)  # the job's own keys, typed
    datamodule = instantiate_group("data", cfg.data)
    if isinstance(datamodule, pl.LightningDataModule):
        datamodule.prepare_data()  # downloads (torchvision datasets), on this one process
    facts = write_shards(
        datamodule,
        str(settings.output),
        overwrite=settings.overwrite,
        chunk_bytes=settings.chunk_bytes,
        num_workers=settings.num_workers,
        storage_options=settings.storage_options,
        start_method=settings.start_method,
    )
    return {"metrics": {f"{split} samples": n for split, n in facts["splits"].items()}, "written": str(settings.output)}
