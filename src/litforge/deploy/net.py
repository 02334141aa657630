"""What gets deployed: the plain fp32 `nn.Module` of a classifier's or regressor's checkpoint, run in batches.

Why a module of its own: the export job and benchmarks/inference.py must time and convert the very same net, rebuilt
from the checkpoint alone (`litforge.tasks.restore.load_for_inference`), whatever wrapped it in training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor

from litforge.checkpointing.load import load_checkpoint
from litforge.core.contracts import DeclaresInputs, ExportTask, check_exportable, trains_on
from litforge.core.errors import CheckpointError
from litforge.tasks.restore import load_for_inference

# key prefixes that wrappers leave on state-dict keys (torch.compile, DDP/FSDP wrappers); a consolidated checkpoint
# may carry them, the plain task does not
WRAPPER_PREFIXES = ("_orig_mod.", "_forward_module.", "module.")


def load_exportable(cfg: DictConfig) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(task, datamodule, net, checkpoint) from `cfg.ckpt_path`: any litforge image classifier (every net, pruned or
    QAT runs, a sharded run's consolidated single-file checkpoint); the net is fp32, on the CPU, in eval mode. The
    checkpoint dict is returned for its provenance record (the deployed model's metadata)."""
    path = str(cfg.ckpt_path)
    checkpoint = strip_wrapper_prefixes(load_checkpoint(path))
    task, datamodule, _ = load_for_inference(cfg, checkpoint=checkpoint)
    task.set_decisions(cfg.task, "export")  # recorded in the exported files' metadata (`decisions`)
    check_exportable(task, datamodule, f"ckpt_path={path}")  # the export contract, before any work
    return task, datamodule, exportable_net(task, path, isinstance(datamodule, DeclaresInputs)), checkpoint


def strip_wrapper_prefixes(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Drop `_orig_mod.` / `_forward_module.` / `module.` key prefixes a wrapped model may have saved."""
    state = checkpoint["state_dict"]
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if state and all(prefix in k for k in state):
                state = {k.replace(prefix, "", 1): v for k, v in state.items()}
                changed = True
    checkpoint["state_dict"] = state
    return checkpoint


def exportable_net(task: ExportTask, path: str, declared: bool = False) -> Any:
    """The plain fp32 `nn.Module` a deployer runs: the task's `deployable_net()` (regression: the net with its target
    scale; else its `net`). A text or RL task whose data does not declare its inputs (`declared`: a language model,
    DQN) gets a clear refusal (a user's task of another kind exports its `net` on its test loader's inputs)."""
    net = task.deployable_net()
    if set(trains_on(task)) & {"text", "rl"} and not declared:
        raise CheckpointError(
            f"{path} holds a {type(task).__name__}, whose data declares no inputs to export (litforge.DeclaresInputs): "
            "export.py exports classifiers of images, features or text (data=text) and regressors"
        )
    return net.float().cpu().eval()


def batched(fn: Callable[[Tensor], object], x: Tensor, batch_size: int = 256) -> Tensor:
    """`fn` over `x` in batches, outputs concatenated: a whole test split at once would need its activations at once."""
    return torch.cat([torch.as_tensor(fn(x[i : i + batch_size])) for i in range(0, len(x), batch_size)])
