"""A checkpoint's litforge metadata read without torch, so that eval/predict/export/generate refuse a file in a second.

`python eval.py ckpt_path=<file>` used to import torch and Lightning, make a run folder and `torch.load` the whole
file before it could say that the file is not there, not a checkpoint, or names a class nobody trusted (5-22 s on
2 cores). The pre-run check (litforge.cli.preflight.checked_overrides) now asks :func:`check_checkpoint_early` first: it
reads the checkpoint's pickle at zip speed and applies the same refusals as the full load, with the same messages
(litforge.checkpointing.load: `checkpoint_file`, `check_lightning_checkpoint`, `recorded_task_class`,
`check_trusted_task_class`, `check_trusted_targets`, `recorded_data_config`).

Why hand-written: torch offers no metadata read that does not import torch, and importing torch is the slow part.
`torch.load` and its weights-only unpickler (`torch._weights_only_unpickler`) live in the torch package; so does
`torch.utils.show_pickle` (pytorch/pytorch#35168), a stub unpickler for looking into saved files, which also
accepts every name a file gives (no refusal to mirror) and runs the pure-Python unpickler. safetensors' header read
does not apply to Lightning's pickled `.ckpt` files. No upstream issue asking for a torch-free read was found
(pytorch, Lightning). The format is stable and small: `torch.save` writes a zip whose `<name>/data.pkl`
is a pickle (protocol 2) in which each tensor is `torch._utils._rebuild_tensor_v2(<persistent id of a storage>,
...)`.

Safety: :class:`_MetadataUnpickler` imports nothing the file names, and calls or builds only what its `find_class`
hands back: placeholders for torch's names (tensors, storages, dtypes, devices; "calling" one does nothing), and
the few plain containers torch's weights-only load allows (OrderedDict, Counter, set, bytearray, complex, latin-1
bytes). Every other name is refused, as `torch.load(weights_only=True)` refuses it. Its `persistent_load` returns a
placeholder instead of reading a storage.

Exactness: this check refuses only files that the full load refuses. Where it cannot tell what torch would do (a
sharded checkpoint folder, a zip member it cannot read, a name torch might have been told to allow, a pickle it
cannot parse) it says nothing, and the job's own load decides as before. A refusal names the first mistake the full
load would meet, except that the full load imports the task class before it reads the data config: a file with
both a trusted task class that no longer builds and an untrusted data config is refused for the latter here.
"""

from __future__ import annotations

import ast
import codecs
import pickle
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing.load import (
    CHECKPOINT_KEY,
    check_lightning_checkpoint,
    check_trusted_targets,
    check_trusted_task_class,
    checkpoint_file,
    needs_unpickling,
    recorded_data_config,
    recorded_task_class,
    trusted_prefixes,
    unreadable,
)
from litforge.config.source import find_method
from litforge.core.contracts import lacks_rows, no_predict_step, no_predicted, writes_text
from litforge.core.errors import CheckpointError

# jobs that rebuild a checkpoint's task (and, but for generate, its data) from the checkpoint alone
INFERENCE_JOBS = ("eval", "predict", "export", "generate")
LITFORGE_TASK = "litforge.tasks.task.LitforgeTask"  # whose default rows read `predicted`

# torch.load(weights_only=True) refuses these modules even when a program allowlists names in them
_BLOCKED_MODULES = ("sys", "os", "posix", "nt")
# names outside torch that torch.load(weights_only=True) allows by default (torch._weights_only_unpickler)
_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): Counter,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "set"): set,
    ("builtins", "complex"): complex,
}
# packages whose import registers more allowed names (torch.serialization.add_safe_globals): only torch can judge
_MAY_BE_ALLOWED = ("torchao", "mlflow")


class Undecided(Exception):
    """The reader cannot tell what torch.load would make of the file: the full load decides."""


class Placeholder:
    """What a tensor, storage, dtype, device or other torch object of the file stands for; built from anything,
    calling it or setting its state does nothing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> Placeholder:
        return Placeholder()


def _latin1_bytes(text: str, encoding: str = "utf-8") -> bytes:
    """`_codecs.encode`, which protocol-2 pickles call to make bytes: only the codec torch uses for it."""
    if encoding not in ("latin1", "latin-1"):
        raise Undecided(f"_codecs.encode with {encoding!r}")
    return codecs.encode(text, "latin-1")


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], path: Path, may_allow: tuple[str, ...]) -> None:
        super().__init__(file, encoding="utf-8")
        self.path = path
        self.may_allow = may_allow  # top-level packages that may have allowlisted their names (the user's own)

    def find_class(self, module: str, name: str) -> Any:
        if module in _BLOCKED_MODULES:
            raise needs_unpickling(
                self.path, f"Trying to load unsupported GLOBAL {module}.{name} whose module {module} is blocked."
            )
        if (module, name) in _ALLOWED:
            return _ALLOWED[module, name]
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        top = module.split(".")[0]
        if top == "torch":
            return Placeholder  # torch's own names: tensors and what rebuilds them; torch judges the rest
        if top in (*_MAY_BE_ALLOWED, *self.may_allow):
            raise Undecided(f"{module}.{name}")
        shown = name if module == "builtins" else f"{module}.{name}"
        raise needs_unpickling(
            self.path,
            f"Unsupported global: GLOBAL {shown} was not an allowed global by default. Please use "
            f"`torch.serialization.add_safe_globals([{shown}])` or the `torch.serialization.safe_globals([{shown}])` "
            "context manager to allowlist this global if you trust this class/function.",
        )

    def persistent_load(self, pid: object) -> Placeholder:
        return Placeholder()  # a storage: its bytes are not read


def read_checkpoint(path: str | Path, trusted_packages: Iterable[str] | None = ()) -> dict[str, Any] | None:
    """The top-level dict of a checkpoint file, as `torch.load(weights_only=True, mmap=True)` returns it but with
    every tensor and torch object a :class:`Placeholder`; None where only torch can tell what the file holds.

    Raises the CheckpointError `litforge.checkpointing.load.load_checkpoint` raises for a missing, empty or
    unreadable file, a file that needs arbitrary unpickling, or one that is not a Lightning checkpoint.
    """
    file = checkpoint_file(path)
    if file.is_dir():
        return None  # a sharded checkpoint: consolidated (with torch) by the full load
    with file.open("rb") as handle:
        if handle.read(4) != b"PK\x03\x04":  # torch.load(mmap=True) reads only torch.save's zip format
            raise unreadable(file, "not a zip archive, as torch.save writes; torch.load(mmap=True) reads no other")
    try:
        archive = zipfile.ZipFile(file)
    except zipfile.BadZipFile as exc:  # no central directory (a truncated file): torch's zip reader fails alike
        raise unreadable(file, f"failed finding central directory ({exc})") from None
    except OSError:
        return None
    may_allow = tuple(str(p).split(".")[0] for p in trusted_packages or ())
    with archive:
        names = archive.namelist()
        prefix = names[0].split("/")[0] if names and "/" in names[0] else None
        record = f"{prefix}/data.pkl"
        if prefix is None or record not in names or f"{prefix}/constants.pkl" in names:
            return None  # not torch.save's layout (or TorchScript): torch names the problem
        info = archive.getinfo(record)
        if info.compress_type != zipfile.ZIP_STORED:
            return None  # torch.save stores its records uncompressed; leave anything else to torch
        try:
            with archive.open(info) as data:
                loaded = _MetadataUnpickler(data, file, may_allow).load()
        except CheckpointError:  # a name torch.load(weights_only=True) refuses
            raise
        except Exception:  # Undecided, or a pickle (or zip member) this reader cannot parse: torch's reader judges it
            return None
    check_lightning_checkpoint(loaded, file)
    return loaded


def check_checkpoint_early(cfg: DictConfig, job: str) -> None:
    """Refuse `ckpt_path` for `job` (eval/predict/export/generate) before Hydra makes a run folder and before torch
    is imported: the checks of the job's own load (litforge.tasks.restore.load_for_inference and
    restore_task), on the checkpoint's metadata."""
    if job not in INFERENCE_JOBS or OmegaConf.is_missing(cfg, "ckpt_path") or cfg.ckpt_path is None:
        return
    path, trusted = str(cfg.ckpt_path), cfg.trusted_packages
    if not isinstance(trusted, (list, tuple)) and not OmegaConf.is_list(trusted):
        return  # a value the config check refuses
    trusted = tuple(str(p) for p in trusted)
    checkpoint = read_checkpoint(path, trusted)
    if checkpoint is None:
        return
    check_trusted_task_class(task_class := recorded_task_class(checkpoint, path), path, trusted_prefixes(trusted))
    if job == "predict":
        check_predict_source(task_class, f"ckpt_path={path}")
    hparams = checkpoint.get("hyper_parameters", {})
    if not isinstance(hparams, dict):
        return
    check_trusted_targets(hparams, path, "task", trusted_prefixes(trusted))
    run_config = checkpoint[CHECKPOINT_KEY].get("run_config")
    if job != "generate" and not OmegaConf.select(cfg, "data") and (not run_config or isinstance(run_config, dict)):
        recorded_data_config(checkpoint, path, trusted)


def check_predict_source(task_class: str, where: str) -> None:
    """predict's task contract (litforge.core.contracts.check_predict_task) judged on the recorded class's source,
    before torch is imported, with the job's own lines: a task that generates text without a `predict_step`, one
    without `prediction_rows`/`answer_columns`, or one whose rows are LitforgeTask's while every `return` of its
    `predict_step` is a mapping written out without `predicted`. What the source cannot tell, the job judges."""
    name = task_class.rpartition(".")[2]
    method = find_method(task_class, "predict_step")
    if method is False and find_method(task_class, "generate_text"):
        raise writes_text(name, where)
    if method is False and task_class.startswith("litforge."):
        raise no_predict_step(name, where)
    if missing := [m for m in ("prediction_rows", "answer_columns") if find_method(task_class, m) is False]:
        raise lacks_rows(name, missing, where)
    if find_method(task_class, "prediction_rows") is not find_method(LITFORGE_TASK, "prediction_rows"):
        return  # the task's own rows say what they read
    returns = [n.value for n in ast.walk(method) if isinstance(n, ast.Return)] if method else []
    keys = [
        [k.value if isinstance(k, ast.Constant) else None for k in r.keys] for r in returns if isinstance(r, ast.Dict)
    ]
    if returns and len(keys) == len(returns) and all(None not in k and "predicted" not in k for k in keys):
        raise no_predicted(name, f"a mapping of {sorted(map(str, keys[0]))}", where)
