"""strategy=pipeline: pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2019 "PipeDream";
interleaved 1F1B, Narayanan et al. 2021; ZB-V, Qi et al. 2024).

The net is cut into `trainer.devices` consecutive stages (litforge.parallel.pipeline_split), one per process, or
`strategy.stages_per_rank` per process for the multi-stage schedules; each batch is cut into `strategy.microbatches`
micro-batches that flow through the stages under a `torch.distributed.pipelining` schedule (`ScheduleGPipe`: all
forwards, then all backwards; `Schedule1F1B`: one forward, one backward in steady state, so at most `stages`
micro-batches' activations are alive per stage; `ScheduleInterleaved1F1B`: stages placed round-robin, a smaller
bubble; `ScheduleZBVZeroBubble`: two stages per rank in a V, weight gradients filling the bubble).

How it fits Lightning, with public APIs: a `DDPStrategy` subclass (so launching, the gloo/nccl process group,
rank-0 logging and checkpoint writing stay Lightning's) that does not wrap the model in DDP, gives every rank the
whole batch (all stages see the same data: the first its inputs, the last its targets), and whose `training_step`,
`validation_step` and `test_step` (Lightning's strategy hooks) run litforge.loops.pipeline.PipelineLoop, which runs
the schedule and the optimizer step (tasks stay unchanged).

Each rank builds only its own stages (`strategy.meta_init`, default): the train job builds the net on the meta
device, and once the process group exists (`setup_environment`, before Lightning restores a checkpoint) the rank
gives storage and a whole build's initial values to its stages' tensors only (litforge.parallel.meta_init); the rest
stays on meta. Checkpoints are ordinary single-file checkpoints: when a state dict is taken, each tensor is sent from
the rank that trains it to the pipeline's first rank, so rank 0 writes the full, current weights and the optimizer
states of all stages merged. eval.py, predict.py and export.py read it like any other; on resume every rank loads
its own part. Rank 0 holds the whole model only while it writes: fine up to models one host's memory holds; beyond
that a sharded checkpoint would be needed, which this strategy does not write. `strategy.meta_init=false`: every
rank builds the whole net, rank 0's weights are broadcast, and before a save every tensor is broadcast from its
stage to every rank.

Pipeline x data parallel (`strategy.data_parallel=N`): the world is `stages x N` processes laid out on a 2-D
DeviceMesh ("pp", "dp"), pipeline outermost as torchtitan lays it out (rank = stage * N + replica). Each replica is
one pipeline (its schedule's p2p and output broadcast run in its "pp" group) that reads its own share of the batches
(the sampler is over the "dp" dimension only); each stage's gradients are averaged over its "dp" group after the
schedule (one flat all-reduce in litforge.loops.pipeline, which says why not torch's DDP wrapper), and the loss and
metrics are averaged over it too, so rank 0 logs the global values.

Refused in one line: nets that cannot be split (BatchNorm, no `pipeline_stages`), tasks without a per-step loss,
MixUp/CutMix (task.mix), gradient accumulation (raise the batch size: micro-batches accumulate already).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch.distributed.device_mesh import init_device_mesh

from litforge.core.bounds import Count
from litforge.core.contracts import SteppableTask, net_of
from litforge.core.errors import ConfigError
from litforge.loops.pipeline import MULTI_STAGE, PipelineLoop, interleavable
from litforge.loops.steps_per_call import EpochSchedulers
from litforge.models.meta import is_meta
from litforge.parallel.meta_init import materialize
from litforge.parallel.pipeline_split import owners, split_net, stage_places
from litforge.parallel.strategies import BuildsOnMeta, attached_module
from litforge.runtime.compat import skip_in_module_sync


@runtime_checkable
class PacksDocuments(Protocol):
    """A text task whose rows may hold several documents (litforge's language_model task, `task.packed`)."""

    packed: bool


@runtime_checkable
class Batched(Protocol):
    """Data read in batches of a known size (every litforge datamodule: contracts.DataModule.batch_size)."""

    batch_size: int


@runtime_checkable
class MixesBatches(Protocol):
    """A task that may mix samples across a batch (MixUp/CutMix: litforge's classification task, `task.mix`)."""

    mixer: object


@runtime_checkable
class LoadsAfterMaterializing(Protocol):
    """A task that loads its own starting weights once a net built on meta has storage (task.init_from)."""

    def on_net_materialized(self) -> None: ...


def packs_documents(task: object) -> bool:
    """Whether the task's batches carry document ids that the net takes (:class:`PacksDocuments`)."""
    return isinstance(task, PacksDocuments) and task.packed


def net_inputs(task: object) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """What the first stage takes of a batch: the net's input; for packed text (task.packed) also the document
    ids, which every stage of the GPT then passes on (GPTStage)."""
    if packs_documents(task):
        return lambda batch: (batch[0], batch[2])
    return lambda batch: batch[:1]


@dataclass
class Layout:
    """Where this rank sits on the (stage, replica) mesh, and the groups it talks in."""

    stage: int
    replica: int
    stage_ranks: list[int]  # global rank of each stage of this rank's pipeline (its replica)
    pp_group: dist.ProcessGroup | None  # this replica's pipeline (None: the whole world, when data_parallel=1)
    dp_group: dist.ProcessGroup | None  # the ranks holding this stage in every replica (None when data_parallel=1)


def pipeline_layout(world_size: int, data_parallel: int, rank: int, device_type: str) -> Layout:
    """The 2-D layout of `world_size` ranks as (world_size // data_parallel) stages x data_parallel replicas; a
    collective (every rank calls it): the mesh creates its groups."""
    if data_parallel == 1:
        return Layout(rank, 0, list(range(world_size)), None, None)
    mesh = init_device_mesh(device_type, (world_size // data_parallel, data_parallel), mesh_dim_names=("pp", "dp"))
    coordinate = mesh.get_coordinate()
    if coordinate is None:  # the mesh spans the whole world, so every rank has a place in it
        raise RuntimeError(f"rank {rank} is not in the {world_size}-rank pipeline mesh")
    stage, replica = coordinate
    return Layout(stage, replica, mesh.mesh[:, replica].tolist(), mesh.get_group("pp"), mesh.get_group("dp"))


def check_divisible(world_size: int, data_parallel: int) -> None:
    if world_size % data_parallel:
        raise ConfigError(
            f"trainer.devices gives {world_size} processes, not divisible by strategy.data_parallel="
            f"{data_parallel}: use stages x data_parallel processes, e.g. trainer.devices="
            f"{max(2, world_size // data_parallel) * data_parallel}"
        )


def check_stages_per_rank(schedule: str, stages_per_rank: int) -> None:
    """One stage per rank for gpipe/1f1b, exactly two for zero_bubble (a V: down the ranks and back)."""
    if schedule == "zero_bubble" and stages_per_rank != 2:
        raise ConfigError(
            f"strategy.schedule=zero_bubble runs exactly 2 stages per rank (a V over the ranks), not "
            f"strategy.stages_per_rank={stages_per_rank}: pass strategy.stages_per_rank=2"
        )
    if schedule not in MULTI_STAGE and stages_per_rank != 1:
        raise ConfigError(
            f"strategy.schedule={schedule} runs one stage per rank, not strategy.stages_per_rank={stages_per_rank}: "
            "pass strategy.schedule=interleaved_1f1b (or zero_bubble) for several, or strategy.stages_per_rank=1"
        )


def check_interleavable(schedule: str, microbatches: int, num_ranks: int) -> None:
    """torch's interleaved 1F1B runs the micro-batches in rounds of about one per rank: a whole number of rounds."""
    if schedule == "interleaved_1f1b" and not interleavable(microbatches, num_ranks):
        raise ConfigError(
            f"strategy.microbatches={microbatches} over {num_ranks} pipeline ranks is not a whole number of "
            f"interleaved_1f1b rounds (about one micro-batch per rank each): pass a multiple of {num_ranks}, e.g. "
            f"strategy.microbatches={max(1, microbatches // num_ranks) * num_ranks}"
        )


class Pipeline(BuildsOnMeta, DDPStrategy):
    """One pipeline stage per process; a torch.distributed.pipelining schedule drives each training step."""

    strategy_name = "litforge_pipeline"

    def __init__(
        self,
        schedule: Literal["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"] = "1f1b",
        microbatches: Count = 4,
        data_parallel: Count = 1,
        stages_per_rank: Count = 1,
        meta_init: bool = True,
        **kwargs: Any,
    ) -> None:
        # their types and ranges: the signature (litforge.config.check judges them where the job starts)
        super().__init__(**kwargs)
        self.schedule, self.microbatches, self.data_parallel = schedule, microbatches, data_parallel
        self.stages_per_rank = stages_per_rank
        check_stages_per_rank(schedule, stages_per_rank)
        self.stage_ranks: list[int] = []  # the global rank of each stage of this rank's pipeline
        self.meta_init = meta_init  # read by the train job (litforge.parallel.meta_init.wants_meta_init)
        self.partial = False  # True once this rank holds only its own stages' tensors (built on meta)
        self.cut: tuple[list[torch.nn.Module], list[int]] | None = None  # (stages, pipeline rank of each)
        self.checked_net: torch.nn.Module | None = None
        self.layout: Layout | None = None
        self.loop: PipelineLoop | None = None
        self.clip_val: float | None = None
        self.clip_algorithm = "norm"
        self.owners: dict[str, list[int]] = {}

    # ---- refusals ---------------------------------------------------------------------------------------------
    def check_task(self, task: pl.LightningModule) -> None:
        """What litforge's train job checks before launching the ranks (the split is checked again per rank)."""
        fix = "or use strategy=ddp"
        net = net_of(task)
        if not isinstance(task, SteppableTask) or not isinstance(net, torch.nn.Module):
            raise ConfigError(
                f"strategy=pipeline needs a task with a `net` and a per-step loss (task=classification, "
                f"task=language_model); {type(task).__name__} has none: {fix}"
            )
        if isinstance(task, MixesBatches) and task.mixer is not None:
            raise ConfigError(f"strategy=pipeline does not mix images across micro-batches: pass task.mix=none {fix}")
        split_net(net, 1)  # BatchNorm or no pipeline_stages: refused before any rank starts
        self.checked_net = net  # check_run cuts it into the configured stage count

    def check_run(
        self, datamodule: pl.LightningDataModule, trainer_kwargs: dict[str, Any], callbacks: list[pl.Callback]
    ) -> None:
        """Refuse the data and trainer settings a pipeline step cannot honour; add the epoch-scheduler stepper
        (the loop drives the optimizer under manual optimization, where Lightning steps no scheduler)."""
        batch_size = datamodule.batch_size if isinstance(datamodule, Batched) else None
        if isinstance(batch_size, int) and batch_size % self.microbatches:
            raise ConfigError(
                f"data.batch_size={batch_size} is not divisible by strategy.microbatches="
                f"{self.microbatches}: use a multiple, e.g. data.batch_size="
                f"{max(1, round(batch_size / self.microbatches)) * self.microbatches}"
            )
        devices, nodes = trainer_kwargs.get("devices"), trainer_kwargs.get("num_nodes", 1)
        if isinstance(devices, int) and isinstance(nodes, int):
            check_divisible(devices * nodes, self.data_parallel)
            num_ranks = devices * nodes // self.data_parallel
            check_interleavable(self.schedule, self.microbatches, num_ranks)
            if self.checked_net is not None:  # too few blocks for the stages: refused before any rank starts
                split_net(self.checked_net, num_ranks * self.stages_per_rank)
        # data_parallel=1: every stage reads the very batches one process would (a DistributedSampler, even over one
        # replica, shuffles in another order than the loader's own sampler); N replicas: each its share, as under
        # DDP (Lightning's sampler over the "dp" dimension, distributed_sampler_kwargs)
        trainer_kwargs["use_distributed_sampler"] = self.data_parallel > 1
        # clipping moves from the Trainer (which refuses it under manual optimization) into the loop, which takes
        # the norm over all stages
        self.clip_val = trainer_kwargs.pop("gradient_clip_val", None)
        self.clip_algorithm = trainer_kwargs.pop("gradient_clip_algorithm", None) or "norm"
        if trainer_kwargs.get("accumulate_grad_batches", 1) != 1:
            raise ConfigError(
                f"trainer.accumulate_grad_batches={trainer_kwargs['accumulate_grad_batches']} under "
                "strategy=pipeline: raise data.batch_size instead (micro-batches already accumulate), "
                "or pass trainer.accumulate_grad_batches=1"
            )
        callbacks.append(EpochSchedulers(1, processes_ok=True))

    # ---- data: every stage of a replica sees that replica's whole batch -----------------------------------------
    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """The data-parallel dimension only: the stages of one pipeline read the same batches."""
        return {"num_replicas": self.data_parallel, "rank": self.global_rank % self.data_parallel}

    # ---- setup --------------------------------------------------------------------------------------------------
    def configure_ddp(self) -> None:
        """No DDP wrapper: cut the net, keep this rank's stage, install the schedule loop (before the optimizers)."""
        self._install()

    def setup(self, trainer: pl.Trainer) -> None:
        self.sync_full_net()  # a later trainer.test without a checkpoint: Lightning broadcasts rank 0's whole net
        super().setup(trainer)
        self._install()  # validate / test / a fit's later trainer.test: the loop is already there (idempotent)

    def split_stages(self, module: pl.LightningModule) -> tuple[list[torch.nn.Module], list[int]]:
        """The net's stages and the pipeline rank of each (once): the layout's groups are created here (a
        collective)."""
        if self.cut is None:
            net = net_of(module)
            if not isinstance(net, torch.nn.Module):  # check_task refused such a task before the ranks started
                raise ConfigError(f"strategy=pipeline needs a task with a `net`; {type(module).__name__} has none")
            check_divisible(self.world_size, self.data_parallel)  # trainer.devices=auto: known only here
            num_ranks = self.world_size // self.data_parallel
            check_interleavable(self.schedule, self.microbatches, num_ranks)
            self.layout = layout = pipeline_layout(
                self.world_size, self.data_parallel, self.global_rank, self.root_device.type
            )
            places = stage_places(self.schedule, num_ranks, self.stages_per_rank)  # stage -> pipeline rank
            self.stage_ranks = [layout.stage_ranks[place] for place in places]
            self.cut = (split_net(net, num_ranks * self.stages_per_rank), places)
        return self.cut

    def setup_environment(self) -> None:
        """After the process group exists: build this rank's stages (`build_own_stages`) before Lightning restores
        a checkpoint into the model (`resume=`, `ckpt_path=`, which happens before `setup`)."""
        super().setup_environment()
        self.build_own_stages()

    def build_own_stages(self) -> None:
        """A net built on the meta device (`strategy.meta_init`): this rank's stages get storage and their initial
        values (those of a whole build with the same seed: litforge.parallel.meta_init.materialize), every other
        tensor of the net stays on meta (once; a net built whole is left as it is)."""
        module = self.lightning_module
        net = net_of(module)
        if module is None or self.partial or not isinstance(net, torch.nn.Module) or not is_meta(net):
            return
        stages, places = self.split_stages(module)
        assert self.layout is not None  # split_stages set it
        mine = [s for s, place in zip(stages, places, strict=True) if place == self.layout.stage]
        materialize(net, self.root_device, keep=[t for s in mine for t in (*s.parameters(), *s.buffers())])
        self.partial = True
        # Lightning broadcasts rank 0's tensors before validate / test: not the net's (each rank has its own part)
        skip_in_module_sync(module, [f"net.{name}" for name in net.state_dict()])
        if isinstance(module, LoadsAfterMaterializing):  # the task's own starting weights (task.init_from) load here;
            module.on_net_materialized()  # a resume then overrides them

    def model_to_device(self) -> None:
        """Only this rank's stages (and the task's other modules: metrics, loss) move to the device when the net
        was built on meta; the tensors left there stay."""
        self.build_own_stages()
        module = attached_module(self)
        net = net_of(module)
        if not self.partial or not isinstance(net, torch.nn.Module):
            super().model_to_device()
            return
        move_held(net, self.root_device)  # its own stages: back from the CPU after a teardown (trainer.test after fit)
        for child in module.children():
            if child is not net:
                child.to(self.root_device)

    def teardown(self) -> None:
        """Lightning's teardown moves the whole module to the CPU, which a net with other ranks' stages on meta
        cannot do: the net steps aside for it and moves only the tensors this rank holds."""
        module = self.lightning_module
        net = net_of(module)
        if module is None or not isinstance(net, torch.nn.Module) or not is_meta(net):
            super().teardown()
            return
        module.net = torch.nn.Identity()
        try:
            super().teardown()
        finally:
            module.net = net
        move_held(net, torch.device("cpu"))

    def _install(self) -> None:
        module = attached_module(self)
        if self.loop is None:
            if not self.partial:
                with torch.no_grad():  # what DDP's wrapper would do: every rank starts from rank 0's weights
                    for tensor in (*module.parameters(), *module.buffers()):
                        dist.broadcast(tensor.data, src=0)
            stages, places = self.split_stages(module)
            layout = self.layout
            assert layout is not None  # split_stages set it
            net = net_of(module)
            assert isinstance(net, torch.nn.Module)  # split_stages refused a task without one
            self.owners = {f"net.{name}": where for name, where in owners(net, stages).items()}
            mine, tied = rank_stages(stages, places, layout.stage)
            holders = sorted(
                {places[i] for where in self.owners.values() if len({places[j] for j in where}) > 1 for i in where}
            )
            self.loop = PipelineLoop(
                module,
                [stages[i] for i in mine],
                mine,
                len(stages),
                self.schedule,
                self.microbatches,
                group=layout.pp_group,
                stage_ranks=self.stage_ranks,
                tied=tied,
                tied_group=tied_groups(layout, holders, self.data_parallel),
                device=self.root_device,
                clip_val=self.clip_val,
                clip_algorithm=self.clip_algorithm,
                net_inputs=net_inputs(module),
                dp_group=layout.dp_group,
            )
        self.loop.install()

    # ---- the steps: Lightning calls the strategy's, which run the schedule ----------------------------------------
    def training_step(self, batch: tuple[Any, ...], batch_idx: int) -> STEP_OUTPUT:
        with self.precision_plugin.train_step_context():
            return self.installed_loop().training_step(batch, batch_idx)

    def validation_step(self, batch: tuple[Any, ...], batch_idx: int, *dataloader_idx: int) -> STEP_OUTPUT:
        with self.precision_plugin.val_step_context():
            task_step = attached_module(self).validation_step
            return self.installed_loop().evaluation_step(task_step, batch, batch_idx, *dataloader_idx)

    def test_step(self, batch: tuple[Any, ...], batch_idx: int, *dataloader_idx: int) -> STEP_OUTPUT:
        with self.precision_plugin.test_step_context():
            task_step = attached_module(self).test_step
            return self.installed_loop().evaluation_step(task_step, batch, batch_idx, *dataloader_idx)

    def installed_loop(self) -> PipelineLoop:
        if self.loop is None:  # configure_ddp / setup install it before any step
            raise RuntimeError("strategy=pipeline: a step ran before the pipeline loop was installed")
        return self.loop

    # ---- checkpoints: one ordinary file -------------------------------------------------------------------------
    def sync_full_net(self) -> None:
        """Every tensor of the net broadcast from the (first) stage that trains it: all ranks hold the whole model
        (not when each rank holds only its own stages: then checkpoints gather onto the pipeline's first rank)."""
        if self.partial:
            return
        if self.owners and self.layout is not None and len(self.layout.stage_ranks) > 1:
            sync_full_net(attached_module(self), self.owners, self.stage_ranks, self.layout.pp_group)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        self.sync_full_net()  # called on every rank by Lightning's checkpoint dump
        state = super().lightning_module_state_dict()
        if self.partial and self.layout is not None and len(self.layout.stage_ranks) > 1:
            gather_full_net(state, self.owners, self.stage_ranks, self.global_rank, self.root_device)
        return state

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """Resume: the whole net's checkpoint loads into this rank's stages; into the tensors left on meta (other
        ranks' stages) a copy is a no-op, which torch warns about once per tensor: that warning is silenced here."""
        with warnings.catch_warnings():
            if self.partial:
                warnings.filterwarnings("ignore", message=r".*to a meta parameter in the current model.*")
            super().load_model_state_dict(checkpoint, strict=strict)

    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Resume: each rank loads the optimizer state of the parameters it holds (the others' stay on their ranks;
        the next checkpoint merges them again)."""
        if self.partial:
            states = [
                held_optimizer_state(optimizer, state)
                for optimizer, state in zip(self.optimizers, checkpoint["optimizer_states"], strict=True)
            ]
            checkpoint = {**checkpoint, "optimizer_states": states}
        super().load_optimizer_state_dict(checkpoint)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer states of all stages merged (each rank's holds only its stage's parameters)."""
        state = super().optimizer_state(optimizer)
        if self.layout is None or len(self.layout.stage_ranks) == 1 or not self.owners:
            return state
        return merged_optimizer_state(state, len(self.layout.stage_ranks), self.layout.pp_group)


def rank_stages(
    stages: list[torch.nn.Module], places: list[int], rank: int
) -> tuple[list[int], list[torch.nn.Parameter]]:
    """The indices of the stages pipeline rank `rank` runs, and its parameters that a stage on another rank also
    holds (the GPT's tied embedding and head, unless zero_bubble puts its first and last stage both on rank 0, where
    autograd sums the two parts itself): their gradients are summed between those ranks after the schedule."""
    mine = [i for i, place in enumerate(places) if place == rank]
    elsewhere = {id(p) for i, stage in enumerate(stages) if places[i] != rank for p in stage.parameters()}
    tied = list({id(p): p for i in mine for p in stages[i].parameters() if id(p) in elsewhere}.values())
    return mine, tied


@torch.no_grad()
def move_held(net: torch.nn.Module, device: torch.device) -> None:
    """The net's tensors that hold data (this rank's stages) moved to `device` in place (the same Parameter objects,
    which the schedule's stages and the optimizer keep); those on meta stay there."""
    for module in net.modules():
        for tensor in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
            if not tensor.is_meta and tensor.device != device:
                tensor.data = tensor.data.to(device)


def tied_groups(layout: Layout, holders: list[int], data_parallel: int) -> dist.ProcessGroup | None:
    """This rank's group for summing tied weights' partial gradients: the holding stages of its own replica (None
    when it holds none). One group per replica; every rank takes part in creating each (a collective)."""
    if not holders:
        return None
    group: dist.ProcessGroup | int | None  # new_group's is NON_GROUP_MEMBER (-100) for a rank outside it
    if data_parallel == 1:
        group = dist.new_group(holders)
    else:
        group, _ = dist.new_subgroups_by_enumeration(  # rank = stage * data_parallel + replica (pipeline_layout)
            [[stage * data_parallel + replica for stage in holders] for replica in range(data_parallel)]
        )
    return group if layout.stage in holders and isinstance(group, dist.ProcessGroup) else None


@torch.no_grad()
def sync_full_net(
    module: torch.nn.Module,
    owners: dict[str, list[int]],
    stage_ranks: list[int] | None = None,
    group: dist.ProcessGroup | None = None,
) -> None:
    """Broadcast each tensor of `module` named in `owners` (state-dict name -> stages holding it) from its first
    holder in this rank's pipeline (`stage_ranks`: the global rank of each stage; default rank = stage), so that
    every rank holds the whole, current model (a collective: all ranks of `group` call it)."""
    tensors: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    for name, where in owners.items():
        dist.broadcast(tensors[name].data, src=stage_ranks[where[0]] if stage_ranks else where[0], group=group)


@torch.no_grad()
def gather_full_net(
    state: dict[str, Any], owners: dict[str, list[int]], stage_ranks: list[int], rank: int, device: torch.device
) -> None:
    """Each tensor of the net (state-dict name -> stages holding it, `owners`) sent from the rank that trains it to
    the pipeline's first rank, into `state` there: that rank writes the whole net (point-to-point, one tensor at a
    time; no other rank ever holds another's stage). The other ranks' `state` keeps meta tensors for those."""
    first = stage_ranks[0]
    for name, where in owners.items():
        src = stage_ranks[where[0]]
        if src == first:
            continue
        if rank == src:
            dist.send(state[name].detach().contiguous(), first)
        elif rank == first:
            received = torch.empty(state[name].shape, dtype=state[name].dtype, device=device)
            dist.recv(received, src)
            state[name] = received


def held_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer `state_dict` cut to the parameters `optimizer` holds with data here (not on meta): the state's
    integer keys number the parameters of `optimizer.param_groups` in order."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {**state, "state": {i: v for i, v in state["state"].items() if not params[int(i)].is_meta}}


def merged_optimizer_state(
    state: dict[str, Any], num_stages: int, group: dist.ProcessGroup | None = None
) -> dict[str, Any]:
    """One optimizer `state_dict` from every stage's (each holds state only for its stage's parameters; the same
    parameter indices on every rank, since every rank's optimizer was built over the whole net), gathered over
    `group` (this rank's pipeline; the whole world by default)."""
    everyone: list[Any] = [None] * num_stages
    dist.all_gather_object(
        everyone,
        {  # a parameter another rank trains has no state here, or (loaded on resume, stages built on meta) a meta one
            k: {n: v.cpu() if isinstance(v, torch.Tensor) else v for n, v in s.items()}
            for k, s in state["state"].items()
            if not any(isinstance(v, torch.Tensor) and v.is_meta for v in s.values())
        },
        group=group,
    )
    merged: dict[Any, Any] = {}
    for rank_state in everyone:
        merged.update(rank_state)
    return {**state, "state": dict(sorted(merged.items()))}
