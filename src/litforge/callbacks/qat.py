"""Quantization-aware training on torchao's QAT API (Lightning 2.0 removed its own QAT callback).

From `start_epoch` on, `torchao.quantization.quantize_(net, QATConfig(base, step="prepare"))` swaps every
`nn.Linear` for a `FakeQuantizedLinear` that rounds activations (int8, per token, dynamic) and weights (int8, per
output channel) in the forward pass, so training learns weights that survive int8. The swap keeps the very same
`nn.Parameter` objects (the optimizer and its state stay valid) and the same state-dict keys (checkpoints of a QAT
run load into a plain model: eval/predict/export work unchanged, and a resumed run re-prepares itself).

When the run is tested, a copy of the tested (best) weights is converted (`step="convert"`) to a real int8 model:
it is evaluated on the same test batches (`test/acc_int8` next to `test/acc`) and saved as
`<checkpoint dir>/model_int8.pt` (a `weights_only=True` loadable dict; :func:`load_int8_model` rebuilds it).

Scope, measured rather than assumed: torchao's QAT covers `nn.Linear` (and embeddings) only, so on conv nets only
the classifier head is quantized. torchao's int8 CPU kernels are slow in eager mode (see the compression report of
`python export.py`); the int8 deployment that is actually faster on CPU is onnxruntime's (export.py builds it).

Pruning composes: masks of `torch.nn.utils.prune` on a Linear are carried over to its fake-quantized replacement.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import Tensor, nn
from torch.nn.utils import prune
from torchmetrics.classification import MulticlassAccuracy

from litforge.callbacks.selection import restart_selection
from litforge.core.bounds import NonNegativeInt
from litforge.core.errors import CheckpointError, ConfigError
from litforge.models.nets import build_net, input_keywords

log = logging.getLogger(__name__)

INT8_FILENAME = "model_int8.pt"
SCHEME = "int8 dynamic per-token activations, int8 per-channel symmetric weights (torchao)"


def quantize_int8(module: nn.Module, qat_step: Literal["prepare", "convert"] | None = None) -> None:
    """Apply the int8 scheme to `module` in place: dynamic int8 activations, int8 per-output-channel weights; with
    `qat_step`, torchao's QAT step of it (`prepare`: fake-quantize, `convert`: a prepared module to real int8).

    `Int8DynamicActivationIntxWeightConfig` (not `Int8DynamicActivationInt8WeightConfig`, which torchao's QATConfig
    rejects as a base config) with int8 weights and one scale per output channel.
    """
    import torchao.quantization as tq  # extra [deploy], ~4 s of import: only runs that quantize pay it

    config = tq.Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=tq.PerAxis(0))
    tq.quantize_(module, config if qat_step is None else tq.qat.QATConfig(config, step=qat_step))


def prepare_qat(module: nn.Module) -> int:
    """Fake-quantize every Linear of `module` in place (keeping pruning masks); returns how many were swapped."""
    masks = _detach_pruning(module)
    quantize_int8(module, "prepare")
    _reattach_pruning(module, masks)
    return sum(type(m).__name__ == "FakeQuantizedLinear" for m in module.modules())


def convert_int8(module: nn.Module) -> nn.Module:
    """A real int8 copy of a (QAT-prepared or plain) module; the original keeps training/testing untouched."""
    converted = copy.deepcopy(module).eval()
    _detach_pruning(converted)  # zeros stay, the reparametrisation goes
    prepared = any(type(m).__name__ == "FakeQuantizedLinear" for m in converted.modules())
    quantize_int8(converted, "convert" if prepared else None)  # never prepared (tested before start_epoch): PTQ
    return converted


def _detach_pruning(module: nn.Module) -> dict[str, Tensor]:
    """Make pruning masks permanent, returning them by parameter path so they can be re-applied."""
    masks = {}
    for name, sub in module.named_modules():
        mask = dict(sub.named_buffers(recurse=False)).get("weight_mask")
        if prune.is_pruned(sub) and mask is not None:
            masks[name] = mask.detach().clone()
            prune.remove(sub, "weight")  # the same Parameter object stays, now holding the masked values
    return masks


def _reattach_pruning(module: nn.Module, masks: dict[str, Tensor]) -> None:
    for name, mask in masks.items():
        prune.custom_from_mask(module.get_submodule(name), "weight", mask)


class QuantizationAwareTraining(pl.Callback):
    """Fake-quantize the task's net from `start_epoch`; at test time convert, evaluate and save the int8 model.

    Args:
        start_epoch: epoch from which training sees int8 rounding (fine-tuning a trained fp32 model for the last
            few epochs is the usual recipe; 0 = from the start).
        save: write `model_int8.pt` beside the checkpoints when the run is tested.
        module: the attribute of the task that holds the net.
        restart_selection: when QAT starts after epoch 0, restart best-checkpoint tracking and early stopping, so
            the tested (and converted) weights are QAT-trained ones.
    """

    def __init__(
        self, start_epoch: NonNegativeInt = 0, save: bool = True, module: str = "net", restart_selection: bool = True
    ) -> None:
        self.start_epoch = start_epoch
        self.save = save
        self.module_name = module
        self.restart_selection = restart_selection
        self.prepared = False
        self._int8: nn.Module | None = None
        self._acc: MulticlassAccuracy | None = None

    def _net(self, pl_module: pl.LightningModule) -> nn.Module:
        net = dict(pl_module.named_children()).get(self.module_name)
        if net is None:
            raise ConfigError(
                f"callbacks.qat.module={self.module_name!r}: {type(pl_module).__name__} has no such nn.Module attribute"
            )
        return net

    def _prepare(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.prepared or trainer.current_epoch < self.start_epoch:
            return
        swapped = prepare_qat(self._net(pl_module))
        if not swapped:
            raise ConfigError(
                f"callbacks.qat found no nn.Linear in {type(pl_module).__name__}.{self.module_name} "
                "(torchao QAT quantizes Linear layers): use a net with Linear layers or drop qat"
            )
        self.prepared = True
        if self.restart_selection and trainer.current_epoch == self.start_epoch and self.start_epoch > 0:
            restart_selection(trainer, "QAT started")
        log.info("QAT: %d Linear layers fake-quantized from epoch %d (%s)", swapped, trainer.current_epoch, SCHEME)

    # prepared at the start of start_epoch, or at once when a run resumes past it (the checkpoint has plain keys)
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._prepare(trainer, pl_module)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._prepare(trainer, pl_module)

    # ---- test: convert the tested weights, evaluate and save the int8 model ----------------------------------------
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._int8 = convert_int8(self._net(pl_module)).to("cpu")
        num_classes = int(pl_module.hparams.get("num_classes", 0))
        # the metric lives on the module's device, not beside the CPU int8 net: compute() gathers its state across
        # ranks, and NCCL has no CPU backend ("No backend type associated with device type cpu")
        self._acc = (
            MulticlassAccuracy(num_classes=num_classes, average="micro").to(pl_module.device) if num_classes else None
        )

    @torch.inference_mode()
    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: STEP_OUTPUT,
        batch: Sequence[torch.Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._int8 is None or self._acc is None:
            return
        images, labels = batch
        self._acc.update(self._int8(images.float().cpu()).to(labels.device), labels)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._acc is not None and self._acc.update_count:
            pl_module.log("test/acc_int8", self._acc.compute(), sync_dist=True)
        if self.save and self._int8 is not None and trainer.is_global_zero:
            folder = _checkpoint_dir(trainer)
            if folder is not None:
                source = Path(trainer.ckpt_path).name if trainer.ckpt_path else None
                path = save_int8_model(self._int8, pl_module, folder / INT8_FILENAME, source=source)
                log.info("QAT: int8 model saved to %s", path)
        self._int8 = None

    # ---- checkpoint --------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"prepared": self.prepared, "start_epoch": self.start_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass  # re-prepared from the epoch number: the model it is restored into is always a fresh fp32 one


def _checkpoint_dir(trainer: pl.Trainer) -> Path | None:
    callback = trainer.checkpoint_callback
    return Path(callback.dirpath) if isinstance(callback, ModelCheckpoint) and callback.dirpath else None


def save_int8_model(int8_net: nn.Module, pl_module: pl.LightningModule, path: Path, source: str | None = None) -> Path:
    """Save the int8 net with what is needed to rebuild it (plain data + tensors: loads with weights_only=True).

    `source`: the file name of the checkpoint whose weights were converted (the tested, usually best, one).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    hparams = {k: v for k, v in dict(pl_module.hparams).items()}
    cls = type(pl_module)
    torch.save(
        {
            "state_dict": int8_net.state_dict(),
            "hyper_parameters": hparams,
            "scheme": SCHEME,
            "task_class": f"{cls.__module__}.{cls.__qualname__}",
            "module": "net",
            "source_checkpoint": source,
        },
        path,
    )
    return path


def read_int8_file(path: str | Path) -> dict[str, Any]:
    """What :func:`save_int8_model` wrote, loaded with `weights_only=True`."""
    import torchao  # noqa: F401  extra [deploy], ~4 s of import; registers the int8 tensor subclasses as safe globals

    return torch.load(path, weights_only=True, map_location="cpu")


def int8_source(path: str | Path) -> str | None:
    """The checkpoint file name an int8 model was converted from."""
    return read_int8_file(path).get("source_checkpoint")


def load_int8_model(path: str | Path) -> nn.Module:
    """Rebuild the int8 net saved by :class:`QuantizationAwareTraining` (no pickled code: `weights_only=True`)."""
    file = Path(path)
    if not file.is_file():
        raise CheckpointError(f"int8 model {file} does not exist: it is written by a run with callbacks=[default,qat]")
    saved = read_int8_file(file)
    hp = saved["hyper_parameters"]
    net = build_net(hp["net"], **input_keywords(hp["input_shape"]), num_classes=hp["num_classes"])
    quantize_int8(net)
    net.load_state_dict(saved["state_dict"], assign=True)
    return net.eval()
