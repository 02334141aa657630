"""The prepare job: any image datamodule → LitData shards that `data=streaming` trains from.

    python prepare.py data=mnist output=data/streaming/mnist      # or output=s3://bucket/mnist

The datamodule is built exactly as `train.py` builds it (same config group, same checks), so the shards hold the
very train/val/test split and normalisation a `data=<dm>` run would use; the writing is litforge.data.streaming's.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from litforge.core.instantiate import instantiate_group, to_plain
from litforge.jobs.checks import check_at_start


def prepare(cfg: DictConfig) -> dict[str, Any]:
    """Write the shards and the facts file; returns the sample counts (shown in the summary)."""
    from litforge.data.streaming import write_shards

    check_at_start(cfg, "prepare")  # once per run: skipped where the command line's check passed it
    datamodule = instantiate_group("data", cfg.data)
    if hasattr(datamodule, "prepare_data"):
        datamodule.prepare_data()  # downloads (torchvision datasets), on this one process
    facts = write_shards(
        datamodule,
        str(cfg.output),
        overwrite=bool(cfg.overwrite),
        chunk_bytes=cfg.chunk_bytes,
        num_workers=int(cfg.num_workers),
        storage_options=to_plain(cfg.get("storage_options")),
        start_method=cfg.get("start_method"),
    )
    return {"metrics": {f"{split} samples": n for split, n in facts["splits"].items()}, "written": str(cfg.output)}
