"""Pruning during training: Lightning's `ModelPruning`, set up deliberately and made resumable.

Lightning's callback is the engine (torch.nn.utils.prune masks, global/local pruning, permanent weights in every
checkpoint). Its defaults do not suit a training template, so this subclass fixes them:

- only the `weight` of Linear / Conv layers is pruned (Lightning's default also prunes biases and BatchNorm);
- no lottery-ticket rewinding (Lightning's default resets the surviving weights to their initial values);
- the schedule is stated as the *total* sparsity to reach at each epoch (`amount` from `start_epoch` to `end_epoch`,
  cubic ramp of Zhu & Gupta 2017); each step prunes exactly what is missing from that target, so it does not
  matter how many steps already ran;
- the masks travel in the checkpoint (`state_dict` of the callback) and are re-applied when a run resumes, so a run
  resumed mid-schedule ends at the same sparsity as an uninterrupted one (plain `ModelPruning` loses its masks:
  the pruned weights grow back and the run ended at 35 % instead of 66 % in a probe);
- modules are found again by name before every step, so another callback may swap them (QAT does) without the
  masks getting lost;
- per-layer and overall sparsity are logged (`sparsity/<param>`, `sparsity/overall`) every epoch.

Pruning happens at the *start* of each scheduled epoch, so the epoch then trains the survivors and its validation
(and any checkpoint it triggers) sees the pruned model. Checkpoints hold plain, already-masked weights (the
zeros are real), so eval/predict/export load them like any other checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import pytorch_lightning as pl
import torch
from pydantic import Field
from pytorch_lightning.callbacks import ModelPruning
from torch import Tensor, nn
from torch.nn.utils import prune

from litforge.callbacks.selection import restart_selection
from litforge.core.bounds import HeldOut, NonNegativeInt
from litforge.core.errors import ConfigError
from litforge.runtime.compat import pruning_targets, set_pruning_targets

PRUNABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class Pruning(ModelPruning):
    """Prune the weights of Linear/Conv layers to `amount` sparsity over `start_epoch..end_epoch`.

    Args:
        method: `l1_unstructured` (smallest weights, one global ranking over all layers), `random_unstructured`,
            `ln_structured` (whole output channels/neurons with the smallest L`norm`, per layer; the last layer,
            the classifier, is left whole since its outputs are the classes) or `random_structured`.
        amount: the final fraction of pruned weights (unstructured) or output channels (structured), in [0, 1).
        start_epoch: first epoch that starts pruned.
        end_epoch: epoch at which `amount` is reached (null = `start_epoch`: prune once).
        norm: the norm of `ln_structured` (1 or 2).
        exclude: parameter-name prefixes to leave dense, e.g. `[net.fc]` to keep the classifier head.
        select_after_schedule: when the final sparsity is reached, restart best-checkpoint tracking and early
            stopping, so the "best" checkpoint (the one tested) is a fully pruned one and the accuracy dip after
            pruning does not count against early-stopping patience. Earlier checkpoints stay on disk.
    """

    def __init__(
        self,
        method: Literal["l1_unstructured", "random_unstructured", "ln_structured", "random_structured"] = (
            "l1_unstructured"
        ),
        amount: HeldOut = 0.5,  # the share of weights pruned by the end of the schedule, in [0, 1)
        start_epoch: NonNegativeInt = 0,
        end_epoch: NonNegativeInt | None = None,
        norm: Annotated[int, Field(ge=1)] = 2,
        exclude: list[str] | None = None,
        select_after_schedule: bool = True,
        verbose: int = 0,
    ) -> None:
        # start_epoch <= end_epoch: litforge.config.relations.RELATIONS
        end_epoch = start_epoch if end_epoch is None else end_epoch
        structured = method.endswith("_structured") and not method.endswith("_unstructured")
        super().__init__(
            pruning_fn=method,
            parameter_names=["weight"],  # never biases
            use_global_unstructured=not structured,  # unstructured: one ranking across layers
            amount=0.0,  # unused: this class computes each step's amount itself
            apply_pruning=False,  # and decides when to prune (at epoch start, see below)
            make_pruning_permanent=True,  # checkpoints hold plain weights with real zeros
            use_lottery_ticket_hypothesis=False,  # keep the trained values of the surviving weights
            pruning_dim=0 if structured else None,  # structured: whole output channels / neurons
            pruning_norm=norm if method == "ln_structured" else None,
            verbose=verbose,
        )
        self.method = method
        self.structured = structured
        self.target = float(amount)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.exclude = tuple(exclude or ())
        self.select_after_schedule = select_after_schedule
        self._names: list[str] = []  # qualified module names of the pruned layers
        self._restored_masks: dict[str, Tensor] = {}  # masks from a checkpoint, applied when training resumes
        self._module: pl.LightningModule | None = None

    # ---- schedule ---------------------------------------------------------------------------------------------------
    def target_sparsity(self, epoch: int) -> float:
        """Total sparsity the model should have while training `epoch` (cubic ramp: prune fast early, gently late)."""
        if epoch < self.start_epoch:
            return 0.0
        if epoch >= self.end_epoch:
            return self.target
        progress = (epoch - self.start_epoch + 1) / (self.end_epoch - self.start_epoch + 1)
        return self.target * (1.0 - (1.0 - progress) ** 3)

    # ---- which parameters -------------------------------------------------------------------------------------------
    def filter_parameters_to_prune(
        self, parameters_to_prune: Sequence[tuple[nn.Module, str]] = ()
    ) -> list[tuple[nn.Module, str]]:
        kept = [(m, n) for m, n in parameters_to_prune if isinstance(m, PRUNABLE)]
        if self.structured and kept:
            # removing output channels of the classifier would remove classes: structured pruning keeps it whole
            kept = kept[:-1]
        return [(m, n) for m, n in kept if not self._excluded(m)]

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._module = pl_module
        self._module_names = {m: name for name, m in pl_module.named_modules()}
        set_pruning_targets(self, ())  # select afresh from the model on every stage (fit, then test)
        super().setup(trainer, pl_module, stage)
        self._names = [self._module_names[m] for m, _ in pruning_targets(self)]
        if not self._names:
            raise ConfigError(
                f"callbacks.pruning found no Linear/Conv weights to prune in {type(pl_module).__name__}"
                f" (exclude={list(self.exclude)}): check callbacks.pruning.exclude"
            )

    def _excluded(self, module: nn.Module) -> bool:
        name = self._module_names.get(module, "")
        return any(name == p or name.startswith(p + ".") for p in self.exclude)

    def _resolve(self, pl_module: pl.LightningModule) -> list[tuple[nn.Module, str]]:
        """Current modules by name: another callback (QAT) may have replaced them since setup."""
        return [(pl_module.get_submodule(name), "weight") for name in self._names]

    # ---- when ------------------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._restored_masks:  # resumed: put the checkpoint's masks back before any step
            for (module, name), key in zip(self._resolve(pl_module), self._names, strict=True):
                mask = self._restored_masks.get(key)
                if mask is not None and not prune.is_pruned(module):
                    prune.custom_from_mask(module, name, mask.to(module.get_parameter(name).device))
            self._restored_masks = {}

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        target = self.target_sparsity(trainer.current_epoch)
        set_pruning_targets(self, self._resolve(pl_module))
        current = self.sparsity(pl_module)["overall"]
        if target > current + 1e-6:
            # torch.nn.utils.prune takes a fraction of the weights that are still unpruned
            self.apply_pruning(min(1.0, (target - current) / (1.0 - current)))
        if self.select_after_schedule and trainer.current_epoch == self.end_epoch and self.target > 0:
            restart_selection(trainer, "pruning reached its final sparsity")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stats = self.sparsity(pl_module)
        pl_module.log_dict({f"sparsity/{k}": v for k, v in stats.items()}, on_epoch=True, sync_dist=True)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass  # ModelPruning may prune here; this class prunes at epoch start only

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the sparsity of the weights actually tested (the best checkpoint may predate the end of the schedule)
        pl_module.log("test/sparsity", self.sparsity(pl_module)["overall"], sync_dist=True)

    # ---- measuring -------------------------------------------------------------------------------------------------
    def sparsity(self, pl_module: pl.LightningModule) -> dict[str, float]:
        """Fraction of zero weights per pruned layer and overall (structured: of zero output channels)."""
        out: dict[str, float] = {}
        zeros = total = 0
        for name in self._names:
            # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
            weight = pl_module.get_submodule(name).weight.detach()  # type: ignore[operator]
            if self.structured:
                units = weight.flatten(1).abs().sum(1) == 0
                layer_zeros, layer_total = int(units.sum()), units.numel()
            else:
                layer_zeros, layer_total = int((weight == 0).sum()), weight.numel()
            out[f"{name}.weight"] = layer_zeros / layer_total
            zeros += layer_zeros
            total += layer_total
        out["overall"] = zeros / max(total, 1)
        return out

    # ---- checkpoint ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        masks = {}
        modules = self._resolve(self._module) if self._module is not None else []
        for name, (module, _) in zip(self._names, modules, strict=True):
            mask = dict(module.named_buffers(recurse=False)).get("weight_mask")
            if mask is not None:
                masks[name] = mask.detach().to("cpu", torch.bool)
        return {"masks": masks, "target": self.target, "start_epoch": self.start_epoch, "end_epoch": self.end_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored_masks = {k: v.float() for k, v in state_dict.get("masks", {}).items()}
