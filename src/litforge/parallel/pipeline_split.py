"""Cutting a net into pipeline stages (strategy=pipeline): the net's own split, checked, and who owns what.

Each net that can be pipelined says how beside its definition (`pipeline_stages(n)`, the
litforge.core.contracts.PipelineModel contract), as it does its FSDP units and tensor-parallel plan: the GPT and the ViT
cut their blocks into runs (embeddings with the first stage, final norm and head with the last), the MLP its layers.
Stages share the net's modules, so a rank keeps the net's structure (with the stages it does not run left on the meta
device: litforge.parallel.pipeline), and the task's `state_dict` keeps its ordinary names (checkpoints stay
single-process checkpoints).

Nets with BatchNorm (model=cnn, model=resnet) are refused: a pipeline runs each micro-batch separately, so their
batch statistics would be those of a micro-batch, and training would no longer equal one process.
"""

from __future__ import annotations

from torch import nn

from litforge.core.contracts import PipelineModel
from litforge.core.errors import ConfigError

# the public batch-norm classes (their common base, nn.modules.batchnorm._BatchNorm, is private)
BATCH_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
)
FIX = "use model=mlp, model=vit or experiment=gpt_char, or strategy=ddp for this model"


def split_net(net: nn.Module, num_stages: int) -> list[nn.Module]:
    """The net's `num_stages` stages; one ConfigError line for a net that cannot be split."""
    norms = [name for name, module in net.named_modules() if isinstance(module, BATCH_NORMS)]
    if norms:
        raise ConfigError(
            f"strategy=pipeline cannot split {type(net).__name__}: its BatchNorm layers (e.g. "
            f"{norms[0]}) would normalise each micro-batch on its own: {FIX}"
        )
    if not isinstance(net, PipelineModel):
        raise ConfigError(
            f"strategy=pipeline needs a net that declares pipeline_stages() (model=mlp, model=vit, "
            f"model=gpt); {type(net).__name__} does not: {FIX}"
        )
    stages = list(net.pipeline_stages(num_stages))
    if len(stages) != num_stages:
        raise ValueError(f"{type(net).__name__}.pipeline_stages({num_stages}) returned {len(stages)} stages")
    return stages


def owners(net: nn.Module, stages: list[nn.Module]) -> dict[str, list[int]]:
    """State-dict name (relative to `net`) → the stages holding that tensor, by identity (a tied weight: several).

    A tensor no stage holds would never be trained: refused, so a wrong split cannot pass silently.
    """
    held = [{id(t) for t in (*stage.parameters(), *stage.buffers())} for stage in stages]
    out: dict[str, list[int]] = {}
    for name, tensor in (*net.named_parameters(remove_duplicate=False), *net.named_buffers(remove_duplicate=False)):
        where = [i for i, ids in enumerate(held) if id(tensor) in ids]
        if not where:
            raise ValueError(f"{type(net).__name__}.pipeline_stages() leaves {name} in no stage")
        out[name] = where
    return out


def stage_places(schedule: str, num_ranks: int, stages_per_rank: int) -> list[int]:
    """The pipeline rank (0 .. num_ranks-1) that runs each of the `num_ranks * stages_per_rank` stages.

    One stage per rank (gpipe, 1f1b): stage i on rank i. interleaved_1f1b places them round-robin ("loop": rank r
    holds r, r + P, r + 2P, ...), so each micro-batch laps the ranks `stages_per_rank` times in smaller steps;
    zero_bubble (ZB-V) places two per rank in a V (rank r holds r and 2P-1-r), so the first and last stage share
    rank 0 and the turn at the bottom of the V needs no send. The same placements torch's schedules assume
    (`ScheduleInterleaved1F1B`, `ScheduleZBVZeroBubble`): a mismatch would deadlock their sends, so
    tests/test_pipeline.py runs both on gloo ranks."""
    total = num_ranks * stages_per_rank
    if schedule == "zero_bubble":
        return [v if v < num_ranks else total - 1 - v for v in range(total)]
    return [v % num_ranks for v in range(total)]
