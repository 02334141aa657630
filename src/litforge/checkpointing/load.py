"""Opening checkpoints safely, with an error a user can act on for every way a path can be wrong.

Every load uses `weights_only=True`: a checkpoint that would need arbitrary unpickling (and so could run code) is
refused, never executed. `mmap=True` keeps the check cheap even for large files.

A checkpoint also carries configs that eval/predict/export *instantiate* (the net, the loss, the data): a
`_target_` there is code to call. :func:`check_trusted_targets` accepts only classes of the packages litforge
builds from (TRUSTED_TARGET_PREFIXES) and the packages a user trusts (`trusted_packages=[myproject]`), so an
untrusted file cannot name `os.system` or `builtins.open` instead.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from litforge.checkpointing.consolidate import consolidate, consolidated_path, is_distributed_checkpoint
from litforge.core.errors import CheckpointError, ConfigError

CHECKPOINT_KEY = "litforge"  # the entry a LitforgeTask writes into its checkpoints: task class, run config, RNG


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """`torch.load` with `weights_only=True`, translating each failure into a CheckpointError that says what to do."""
    import torch  # torch-free --help

    from litforge.checkpointing.io import wait_for_checkpoint_writes  # torch-free --help

    wait_for_checkpoint_writes()  # a checkpoint this process is still making durable (litforge.checkpointing.io)
    file = checkpoint_file(path)
    if file.is_dir():  # sharded (strategy=fsdp/tp): merge once, beside it, then load that
        merged = consolidated_path(file)
        if not merged.exists() or merged.stat().st_mtime < (file / ".metadata").stat().st_mtime:
            consolidate(file, merged)
        file = merged
    try:
        checkpoint = torch.load(file, map_location=map_location, weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise needs_unpickling(file, first_line) from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        raise unreadable(file, str(exc).splitlines()[0]) from None
    check_lightning_checkpoint(checkpoint, file)
    return checkpoint


def checkpoint_file(path: str | Path) -> Path:
    """The file `path` names, or a sharded checkpoint's folder, after what a path alone tells (no torch needed):
    a CheckpointError for a missing file (naming the newest checkpoints nearby), another folder, an empty file."""
    file = Path(path).expanduser()
    if not file.exists():  # the newest checkpoints of the same run (its folder, or its checkpoints/), none of others
        near = [*file.parent.glob("*.ckpt"), *file.parent.glob("checkpoints/*.ckpt")]
        near = sorted(near, key=lambda p: p.stat().st_mtime, reverse=True)[:3]
        hint = f" The newest beside it: {', '.join(map(str, near))}." if near else ""
        raise CheckpointError(f"checkpoint {file} does not exist.{hint} Pass ckpt_path=<run>/checkpoints/last.ckpt.")
    if file.is_dir():
        if is_distributed_checkpoint(file):
            return file
        raise CheckpointError(f"checkpoint {file} is a directory; pass the .ckpt file inside it, e.g. {file}/last.ckpt")
    if file.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {file} is empty (0 bytes): the run that wrote it was probably killed; "
            "use an earlier checkpoint of that run"
        )
    return file


def needs_unpickling(file: Path, reason: str) -> CheckpointError:
    return CheckpointError(
        f"refusing to load {file}: it needs arbitrary unpickling, which could run code ({reason}). "
        "litforge only loads checkpoints that hold plain tensors and data (torch.load weights_only=True)"
    )


def unreadable(file: Path, reason: str) -> CheckpointError:
    return CheckpointError(
        f"{file} is not a readable PyTorch checkpoint (truncated or corrupt: {reason}). "
        "Use another checkpoint of the run, e.g. last.ckpt or the best epoch*.ckpt"
    )


def check_lightning_checkpoint(checkpoint: object, file: Path) -> None:
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{file} is a PyTorch file but not a Lightning checkpoint (no 'state_dict'); "
            "pass a .ckpt written by `python train.py`"
        )


def recorded_task_class(checkpoint: dict[str, Any], path: str) -> str:
    """The dotted name of the task class that wrote a litforge checkpoint (nothing is imported)."""
    meta = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(meta, dict) or not isinstance(meta.get("task_class"), str):
        raise CheckpointError(
            f"{path} is a PyTorch file but not a litforge checkpoint (no '{CHECKPOINT_KEY}' entry): "
            "pass a .ckpt written by `python train.py` (e.g. logs/train/runs/<run>/checkpoints/last.ckpt)"
        )
    return meta["task_class"]


def check_trusted_task_class(recorded: str, path: str, trusted: tuple[str, ...] = ()) -> None:
    """A checkpoint picks its task class only among litforge's tasks and the packages in `trusted`
    (`trusted_packages`): a file is data, so it never picks other code to import."""
    module_name = recorded.rpartition(".")[0]
    allowed = ("litforge.tasks.", *(p for p in trusted if p not in TRUSTED_TARGET_PREFIXES))  # the user's packages
    if not f"{module_name}.".startswith(allowed):
        package = module_name.split(".")[0]
        raise CheckpointError(
            f"{path} names task class {recorded!r}, which is not a litforge task; if {package} is your own package "
            f"and the file is yours, trust it: trusted_packages=[{package}]"
        )


def recorded_data_config(checkpoint: dict[str, Any], path: str, trusted_packages: Iterable[str] | None = ()) -> Any:
    """The data config a checkpoint's run was trained with, for eval/predict/export without `data=`: refused when
    absent, or when it names a class outside the trusted packages."""
    run_config = checkpoint[CHECKPOINT_KEY].get("run_config") or {}
    data_cfg = run_config.get("data")
    if not data_cfg:
        raise ConfigError(f"{path} does not record its data config: pass data=<option> (see conf/data/)")
    check_trusted_targets(data_cfg, path, "data", trusted_prefixes(trusted_packages))
    return data_cfg


# what a checkpoint's configs may name as `_target_`: litforge's own classes and the libraries its configs use; a
# user's own packages join them through the `trusted_packages` key of every job (conf/<job>.yaml)
TRUSTED_TARGET_PREFIXES = (
    "litforge.",
    "torch.nn.",
    "torch.optim.",
    "torchvision.models.",
    "torchvision.transforms.",
    "torchmetrics.",
    "pytorch_lightning.callbacks.",
    "pytorch_lightning.loggers.",
)


def trusted_prefixes(packages: Iterable[str] | None = ()) -> tuple[str, ...]:
    """litforge's own trusted prefixes plus the user's `trusted_packages` (`myproject` trusts `myproject.*`)."""
    return TRUSTED_TARGET_PREFIXES + tuple(f"{str(p).rstrip('.')}." for p in packages or ())


def check_trusted_targets(node: object, path: str | Path, where: str, trusted: tuple[str, ...] = ()) -> None:
    """Refuse a checkpoint config whose `_target_` (anywhere inside `node`) is not a trusted class."""
    trusted = trusted or TRUSTED_TARGET_PREFIXES
    if isinstance(node, dict):
        target = node.get("_target_")
        if target is not None and not (isinstance(target, str) and target.startswith(trusted)):
            package = str(target).split(".")[0]
            raise CheckpointError(
                f"refusing to use {path}: its {where} config names {target!r} to build, which is not a class of "
                f"{', '.join(p.rstrip('.') for p in trusted)}; a checkpoint could run arbitrary code that way. If "
                f"the file is yours and {package} is your own package, trust it: trusted_packages=[{package}]"
            )
        for key, value in node.items():
            check_trusted_targets(value, path, f"{where}.{key}" if where else str(key), trusted)
    elif isinstance(node, (list, tuple)):
        for item in node:
            check_trusted_targets(item, path, where, trusted)
