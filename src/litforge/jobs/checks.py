"""What each job checks before it starts, declared in one place (:data:`JOB_CHECKS`; docs/checks.md), run once.

The command line runs a job's checks before Hydra makes a run folder (litforge.cli.preflight); a job called in code
runs them where it starts (:func:`check_at_start`), skipped for a config this process checked already. Every mistake
is reported, one line each (litforge.core.errors.refuse_each): each check judges values of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from litforge.checkpointing.metadata import check_checkpoint_early
from litforge.config.check import check_config
from litforge.config.relations import PREDICTS
from litforge.config.settings import QUANTIZATIONS
from litforge.core.errors import ConfigError, LitforgeError, raise_found, refuse_each
from litforge.data.tables import check_table_job
from litforge.jobs.tuning import check_tuning

_CHECKED: set[str] = set()  # digests of the configs whose job checks passed in this process


def tabular_data(cfg: Any) -> None:
    """data=csv: the file reads, its columns can train, the target's kind fits what the task predicts."""
    check_table_job(cfg.data or {}, PREDICTS.get(str(OmegaConf.select(cfg, "task._target_", default=""))))


def streaming_data(cfg: Any) -> None:
    """data=streaming: the shards' facts file (written by prepare) reads."""
    data: Any = cfg.data or {}
    if str(data.get("_target_", "")).endswith("StreamingImageDataModule") and "://" not in str(data.input_dir):
        from litforge.data.streaming import read_facts

        read_facts(str(data.input_dir))


def image_folder(cfg: Any) -> None:
    """data=image_folder: every layout mistake, named with its folder; two classes or more."""
    data: Any = cfg.data or {}
    root = str(data.get("root"))
    if not str(data.get("_target_", "")).endswith("ImageFolderDataModule") or not Path(root).is_dir():
        return
    from litforge.data.folder_layout import FolderLayout

    classes = FolderLayout.scan(root).class_names
    if len(classes) == 1:  # torchmetrics' multiclass metrics would fail inside fit
        raise ConfigError(
            f"data.root={root} has one class folder ({classes[0]}): a classifier needs two or more; add a "
            f"folder per class, e.g. {Path(root) / 'other' / '001.png'}"
        )


def float8(cfg: Any) -> None:
    """float8=tensorwise|rowwise where float8 matmuls can run (litforge.models.float8)."""
    if cfg.float8 != "none":
        from litforge.models.float8 import float8_refusal  # imports torch: only for a run that asks for float8

        if (refusal := float8_refusal(str(cfg.float8), cfg.trainer.get("accelerator"))) is not None:
            raise ConfigError(refusal)


def source_datamodule(cfg: Any) -> None:
    """prepare reads a source datamodule; data=streaming reads what prepare writes."""
    if "data" not in cfg or str(cfg.data.get("_target_", "")).endswith("StreamingImageDataModule"):
        raise ConfigError(
            "prepare needs a source datamodule: pass data=digits, mnist, cifar10 or image_folder "
            "(data=streaming reads what prepare writes)"
        )


def export_options(cfg: Any) -> None:
    """export's formats and quantizations, by name (their type, and input_dtype, are typed keys: JobSettings)."""
    if not all(OmegaConf.is_list(cfg[key]) for key in ("formats", "quantize")):
        return  # not a list: the config check's line says so
    formats, quantize = [str(f) for f in cfg.formats], [str(q) for q in cfg.quantize]
    if [f for f in formats if f != "onnx"] or not formats:
        unknown = [f for f in formats if f != "onnx"] or "(none)"
        raise ConfigError(f"formats={formats}: unknown export format {unknown}; supported: onnx (e.g. formats=[onnx])")
    if bad := [q for q in quantize if q not in QUANTIZATIONS]:
        raise ConfigError(
            f"quantize={quantize}: unknown {bad}; choose from {', '.join(QUANTIZATIONS)} (or quantize=[])"
        )


# job -> its checks, in order; check_config (every key's type and range, the relations) is every job's
JOB_CHECKS: dict[str, tuple[Callable[[Any], object], ...]] = {
    "train": (check_config, tabular_data, streaming_data, image_folder, float8, check_tuning),
    "eval": (partial(check_checkpoint_early, job="eval"), check_config),  # the checkpoint first: torch-free
    "predict": (partial(check_checkpoint_early, job="predict"), check_config),
    "export": (partial(check_checkpoint_early, job="export"), check_config, export_options),
    "generate": (partial(check_checkpoint_early, job="generate"), check_config),
    "prepare": (source_datamodule, check_config),
}


def check_job(cfg: Any, job: str, found: list[LitforgeError] | None = None) -> None:
    """Run `job`'s checks on `cfg`, after the refusals in `found` (the command line's own); raise one error carrying
    every line. The config check imports targets (torch, 4-6 s) only when nothing was refused before it."""
    found = [] if found is None else found
    values = lambda: check_config(cfg, imports=not found)  # noqa: E731  judges `found` when it runs
    refuse_each(found, *(values if check is check_config else partial(check, cfg) for check in JOB_CHECKS[job]))
    raise_found(found)
    _CHECKED.add(_digest(cfg))


def check_at_start(cfg: Any, job: str) -> None:
    """A job's start: its checks, unless this process passed the same config already (the command line's)."""
    if _digest(cfg) not in _CHECKED:
        check_job(cfg, job)


def _digest(cfg: Any) -> str:
    return hashlib.sha1(OmegaConf.to_yaml(cfg).encode()).hexdigest()
