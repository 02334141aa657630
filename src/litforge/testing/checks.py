"""The single-process checks of the contract kit (litforge.testing), each on a config from `compose(...)`.

Every check builds what the training job builds (litforge.jobs.build: the datamodule, then the task from its
`describe()`) and fits it with a quiet CPU Trainer for a few steps: the contracts are about what the jobs do with the
user's classes, so the checks run those jobs' own code, not a model of it. A user's mistake that litforge reports
as a one-line error (a LitforgeError) becomes the check's AssertionError line as it is.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn

from litforge.config.settings import Train, job_settings
from litforge.core.contracts import DataModule, check_trainable, missing_members
from litforge.core.errors import LitforgeError
from litforge.core.instantiate import instantiate_group
from litforge.jobs.build import build_task, task_class
from litforge.jobs.export import export
from litforge.jobs.predict import predict
from litforge.tasks.restore import load_for_inference
from litforge.testing.compose import compose

#: the shape facts that size a net's output, in the order they are looked for in `describe()`
OUTPUT_FACTS = ("num_classes", "num_targets", "vocab_size", "num_actions")
STEPS = 4  # the resume check trains this many steps straight, and stops after half of them in its second run


@contextlib.contextmanager
def one_line(what: str) -> Iterator[None]:
    """A LitforgeError (a one-line refusal the command line would print) becomes the check's AssertionError."""
    try:
        yield
    except LitforgeError as exc:
        raise AssertionError(f"{what}: {exc}") from None


def prepared(cfg: DictConfig, tmp_path: str | Path, name: str, **changes: object) -> DictConfig:
    """A copy of `cfg` whose run writes under `tmp_path/name` (Hydra's run folder does not exist outside a run)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    assert isinstance(out, DictConfig)
    folder = Path(tmp_path) / name
    with open_dict(out):
        out.paths.output_dir = str(folder)
        out.paths.log_dir = str(Path(tmp_path) / "logs")
        for key, value in changes.items():
            OmegaConf.update(out, key, value, force_add=True)
    return out


@contextlib.contextmanager
def scratch(cfg: DictConfig) -> Iterator[DictConfig]:
    """`cfg` writing into a temporary folder, removed afterwards (for the checks that keep no file)."""
    with tempfile.TemporaryDirectory(prefix="litforge-kit-") as folder:
        yield prepared(cfg, folder, "run")


def build(cfg: DictConfig, seed: bool = True) -> tuple[pl.LightningDataModule, pl.LightningModule]:
    """(datamodule, task) as the training job builds them, seeded as it seeds them."""
    if seed:
        pl.seed_everything(job_settings(cfg, Train).seed, workers=True, verbose=False)  # the job's: conf/train.yaml
    with one_line("building the data and the task as `litforge train` does"):
        datamodule = instantiate_group("data", cfg.data)
        check_trainable(task_class(cfg), datamodule)
        task = build_task(cfg, datamodule.describe())
    return datamodule, task


def quiet_trainer(root: str | Path, steps: int, callbacks: Sequence[pl.Callback] = (), **overrides: Any) -> pl.Trainer:
    """A CPU Trainer that trains `steps` optimizer steps and writes nothing of its own (no logger, progress bar,
    summary, validation or checkpoint callback): the checks compare exact weights, and anything else is noise.
    `overrides`: more of `pl.Trainer`'s keyword arguments, each of its own type."""
    options: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=1000,  # the steps end the run; an epoch-based LR schedule still has a length
        logger=False,
        enable_checkpointing=any(isinstance(cb, ModelCheckpoint) for cb in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(root),
        callbacks=list(callbacks),
    )
    return pl.Trainer(**{**options, **overrides})


def fit(
    trainer: pl.Trainer, task: pl.LightningModule, datamodule: pl.LightningDataModule, ckpt_path: str | None = None
) -> None:
    with one_line("training"), warnings_quiet():
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)


@contextlib.contextmanager
def warnings_quiet() -> Iterator[None]:
    """Lightning's advice for real runs (few workers, a small log interval) says nothing about a contract."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(pytorch_)?lightning.*")
        warnings.filterwarnings("ignore", message=r".*(num_workers|log_every_n_steps|does not have many workers).*")
        yield


def inputs_of(batch: object) -> object:
    """The net's input in a batch as the task receives it: the batch itself or its first element."""
    if isinstance(batch, (tuple, list)):
        return batch[0]
    if isinstance(batch, Mapping):
        return next(iter(batch.values()))
    return batch


def parameters(task: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in task.named_parameters()}


def weights(task: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in task.state_dict().items()}


def first_difference(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> str | None:
    """The first tensor of `a` that `b` lacks or holds with other values (None: all equal, bit for bit)."""
    for name, tensor in a.items():
        other = b.get(name)
        if other is None or other.shape != tensor.shape or not torch.equal(other, tensor):
            diff = "" if other is None or other.shape != tensor.shape else f" (max |diff| {max_diff(tensor, other)})"
            return f"{name}{diff}"
    return None


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def trusted_for(cfg: DictConfig, task: object, datamodule: object) -> list[str]:
    """The packages outside litforge that the config's classes live in: the project's own, which a project trusts
    (`trusted_packages`) for eval, predict and export of its checkpoints."""
    names = {type(task).__module__, type(datamodule).__module__}
    for node in (cfg[group] for group in ("model", "loss", "data", "task") if group in cfg):
        if OmegaConf.is_dict(node) and node.get("_target_"):
            names.add(str(node._target_))
    packages = {name.split(".")[0] for name in names}
    return sorted(packages - {"litforge", "torch", "torchvision", "pytorch_lightning", "lightning", "builtins"})


def InputProbe(seen: dict[str, Any], forward: bool = False) -> pl.Callback:  # noqa: N802 - builds a Callback class lazily
    """A callback that keeps the first training batch's input as the task receives it (after the datamodule's
    transfer hooks) in `seen["inputs"]`, and with `forward`, the task's output on it in eval mode in `seen["out"]`."""

    class Probe(pl.Callback):
        def on_train_batch_start(
            self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
        ) -> None:
            if "inputs" in seen:
                return
            seen["inputs"] = inputs_of(batch)
            if forward:
                was_training = pl_module.training
                pl_module.eval()
                with torch.no_grad():
                    seen["out"] = pl_module(seen["inputs"])
                pl_module.train(was_training)

    return Probe()


def trained_checkpoint(
    cfg: DictConfig, tmp_path: str | Path, name: str = "kit"
) -> tuple[Path, pl.LightningModule, pl.LightningDataModule, object]:
    """A real checkpoint file of one training step of `cfg` (the checkpoint hooks of the task and the datamodule run
    as in `litforge train`); with the trained (task, datamodule) and the input of its training batch."""
    run = prepared(cfg, tmp_path, name)
    datamodule, task = build(run)
    seen: dict[str, Any] = {}
    trainer = quiet_trainer(run.paths.output_dir, steps=1, callbacks=[InputProbe(seen)])
    fit(trainer, task, datamodule)
    path = Path(run.paths.output_dir) / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(path)
    return path, task, datamodule, seen.get("inputs")


def job_config(job: str, tmp_path: str | Path, name: str, **values: object) -> DictConfig:
    """litforge's own `<job>.yaml` (predict, export) with `values`, writing under `tmp_path/name`."""
    cfg = compose([], config_name=job)
    return prepared(cfg, tmp_path, name, **values)


# ---- the checks ------------------------------------------------------------------------------------------------------
def check_describe_sizes_net(cfg: DictConfig) -> None:
    """The datamodule states its kind and shape (the DataModule contract), `describe()` is plain data, and the task
    built from it takes a batch of the training loader, as training hands it over, and answers with outputs of the
    described size (the first of `num_classes`, `num_targets`, `vocab_size`, `num_actions` it states)."""
    with scratch(cfg) as cfg:
        _check_describe_sizes_net(cfg)


def _check_describe_sizes_net(cfg: DictConfig) -> None:
    datamodule, task = build(cfg)
    assert isinstance(datamodule, DataModule), (
        f"data `{type(datamodule).__name__}` lacks {', '.join(missing_members(datamodule, DataModule))} "
        "(litforge.DataModule)"
    )
    facts = datamodule.describe()
    try:
        loaded = round_trip(facts)
    except Exception as exc:
        raise AssertionError(f"describe() is not plain data a checkpoint can hold: {first_line(exc)}") from None
    assert loaded == facts, "describe() does not survive a checkpoint's save and load unchanged"

    seen: dict[str, Any] = {}
    probe = InputProbe(seen, forward=True)
    fit(quiet_trainer(cfg.paths.output_dir, steps=1, callbacks=[probe]), task, datamodule)
    assert "out" in seen, "the training loader gave no batch"
    out = first_tensor(seen["out"])
    assert out.shape[0] == len(seen["inputs"]), (
        f"the task's output has {out.shape[0]} rows for a batch of {len(seen['inputs'])}"
    )
    fact = next((f for f in OUTPUT_FACTS if f in facts), None)
    if fact is not None:
        assert out.shape[-1] == facts[fact], (
            f"the net's output has size {out.shape[-1]}, but describe() says {fact}={facts[fact]}: the net must be "
            "sized by the data's shape keywords"
        )


def check_one_step_trains(cfg: DictConfig) -> None:
    """One optimizer step through a real Trainer gives a finite loss and changes the trainable parameters."""
    with scratch(cfg) as cfg:
        _check_one_step_trains(cfg)


def _check_one_step_trains(cfg: DictConfig) -> None:
    datamodule, task = build(cfg)
    before = parameters(task)
    assert before, f"task `{type(task).__name__}` has no parameters"
    losses: list[torch.Tensor] = []

    class Loss(pl.Callback):
        def on_train_batch_end(
            self,
            trainer: pl.Trainer,
            pl_module: pl.LightningModule,
            outputs: object,
            batch: object,
            batch_idx: int,
        ) -> None:
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if isinstance(loss, torch.Tensor):
                losses.append(loss.detach())

    fit(quiet_trainer(cfg.paths.output_dir, steps=1, callbacks=[Loss()]), task, datamodule)
    if not losses and "train/loss" in task.trainer.callback_metrics:
        losses.append(task.trainer.callback_metrics["train/loss"])
    assert losses, f"`{type(task).__name__}.training_step` returned no loss"
    assert bool(torch.isfinite(losses[0]).all()), f"the first training step's loss is {losses[0].tolist()}"
    after = parameters(task)
    trainable = [name for name, p in task.named_parameters() if p.requires_grad]
    assert trainable, f"task `{type(task).__name__}` has no trainable parameters"
    changed = [name for name in trainable if not torch.equal(before[name], after[name])]
    assert changed, f"one training step changed no parameter (e.g. {trainable[0]}): no gradient reaches the weights"


def check_checkpoint_round_trip(cfg: DictConfig, tmp_path: str | Path) -> None:
    """A checkpoint written after one step loads under `torch.load(weights_only=True)`, and the task rebuilt from
    that file alone (as eval, predict and export rebuild it) gives the trained task's outputs, bit for bit."""
    path, task, datamodule, x = trained_checkpoint(cfg, tmp_path, "round_trip")
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise AssertionError(
            f"the checkpoint does not load with weights_only=True (hyperparameters must be plain data): "
            f"{first_line(exc)}"
        ) from None
    inference = OmegaConf.create(
        {"ckpt_path": str(path), "trusted_packages": trusted_for(cfg, task, datamodule), "data": None}
    )
    with one_line("rebuilding the task from its checkpoint alone"):
        rebuilt, rebuilt_data, _ = load_for_inference(inference)
    assert type(rebuilt) is type(task), f"the checkpoint rebuilt a {type(rebuilt).__name__}"
    assert isinstance(datamodule, DataModule), (
        f"data `{type(datamodule).__name__}` lacks `describe` (litforge.DataModule)"
    )
    assert rebuilt_data.describe() == datamodule.describe(), "the checkpoint's data describes another shape"
    different = first_difference(weights(task), weights(rebuilt))
    assert different is None, f"the rebuilt task's {different} differs from the trained one's"
    task.eval()
    with torch.no_grad():
        expected, got = task(x), rebuilt(x)
    assert torch.equal(first_tensor(expected), first_tensor(got)), (
        "the task rebuilt from its checkpoint gives other outputs than the trained one"
    )


def check_resume_mid_epoch_exact(cfg: DictConfig, tmp_path: str | Path, steps: int = STEPS) -> None:
    """`steps` steps straight end with the very weights of `steps // 2` steps, a checkpoint saved mid-epoch, and a
    resumed run from that file in a new process's state (new datamodule, new task): the loader's position, the
    optimizer, the scheduler and the RNG all travel in the checkpoint."""
    half = steps // 2
    straight_cfg = prepared(cfg, tmp_path, "straight")
    datamodule, task = build(straight_cfg)
    fit(quiet_trainer(straight_cfg.paths.output_dir, steps=steps), task, datamodule)
    straight = weights(task)
    assert task.trainer.global_step == steps, f"the straight run stopped at step {task.trainer.global_step}"
    batches = task.trainer.num_training_batches
    assert batches > half, (
        f"an epoch has {batches} batches: too few to stop mid-epoch after {half}; use a smaller data.batch_size"
    )

    stopped_cfg = prepared(cfg, tmp_path, "stopped")
    folder = Path(stopped_cfg.paths.output_dir) / "checkpoints"
    save = ModelCheckpoint(dirpath=folder, every_n_train_steps=half, save_top_k=-1, save_on_train_epoch_end=False)
    datamodule, task = build(stopped_cfg)
    fit(quiet_trainer(stopped_cfg.paths.output_dir, steps=half, callbacks=[save]), task, datamodule)
    saved = sorted(folder.glob("*.ckpt"))
    assert saved, f"no checkpoint was saved after {half} steps"

    datamodule, task = build(prepared(cfg, tmp_path, "resumed"))
    fit(quiet_trainer(Path(tmp_path) / "resumed", steps=steps), task, datamodule, ckpt_path=str(saved[-1]))
    different = first_difference(straight, weights(task))
    assert different is None, (
        f"resumed after {half} of {steps} steps, the weights differ from a run straight through at {different}"
    )


def check_predict_contract(cfg: DictConfig, tmp_path: str | Path) -> None:
    """The predict job (its own function) runs on a real checkpoint of the task: its contract check passes (the
    task's `predict_step` returns `predicted`; the datamodule serves its test split) and it writes one row per
    test input."""
    path, task, datamodule, _ = trained_checkpoint(cfg, tmp_path, "predict_ckpt")
    output = Path(tmp_path) / "predict" / "predictions.csv"
    job = job_config(
        "predict",
        tmp_path,
        "predict",
        ckpt_path=str(path),
        trusted_packages=trusted_for(cfg, task, datamodule),
        output=str(output),
        device="cpu",
    )
    with one_line("predict"), warnings_quiet():
        result = predict(job)
    rows = output.read_text().splitlines() if output.exists() else []
    assert len(rows) > 1 and result["metrics"]["predictions"] == len(rows) - 1, "predict wrote no prediction"
    assert rows[0].startswith("input,"), f"predictions.csv has the columns {rows[0]}"


def check_export_contract(cfg: DictConfig, tmp_path: str | Path) -> None:
    """The export job (its own function) turns a real checkpoint of the task into an ONNX model that onnxruntime
    runs like the task (export's own parity check, on the test split): fp32 only, no int8 variants, one timing."""
    path, task, datamodule, _ = trained_checkpoint(cfg, tmp_path, "export_ckpt")
    job = job_config(
        "export",
        tmp_path,
        "export",
        ckpt_path=str(path),
        trusted_packages=trusted_for(cfg, task, datamodule),
        quantize=[],
        **{"report.batch_sizes": [1], "report.threads": [1], "report.rounds": 1},
    )
    with one_line("export"), warnings_quiet(), contextlib.redirect_stdout(io.StringIO()):
        result = export(job)
    onnx = Path(result["onnx"])
    assert onnx.is_file() and onnx.stat().st_size > 0, "export wrote no ONNX model"


# ---- small helpers ---------------------------------------------------------------------------------------------------
def round_trip(value: object) -> object:
    """`value` saved and loaded back as checkpoints are (torch.load with weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def first_tensor(out: object) -> torch.Tensor:
    """A task's forward output, or the first of the outputs it returns."""
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert isinstance(out, torch.Tensor), f"the task's forward returned {type(out).__name__}, not a tensor"
    return out


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
