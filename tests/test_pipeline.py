"""strategy=pipeline: the nets' pipeline splits, the schedule loop on gloo ranks, and the strategy end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import read_metrics, run_cli, single_run
from litforge.core.errors import ConfigError
from litforge.models.cnn import CNN
from litforge.models.gpt import GPT
from litforge.models.mlp import MLP
from litforge.models.vit import VisionTransformer
from litforge.parallel.pipeline_split import owners, split_net


def _nets() -> list[tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    return [
        (MLP(1, (4, 4), 3, hidden_dims=(8, 8, 8), dropout=0.1), torch.randn(5, 1, 4, 4)),
        (VisionTransformer(3, (8, 8), 4, patch_size=4, dim=16, depth=3, heads=2), torch.randn(5, 3, 8, 8)),
        (GPT(11, 6, dim=16, depth=4, heads=2), torch.randint(0, 11, (5, 6))),
    ]


@pytest.mark.parametrize("num_stages", [2, 3])
def test_stages_compose_to_the_whole_net(num_stages: int) -> None:
    for net, x in _nets():
        net.eval()
        stages = split_net(net, num_stages)
        y = x
        for stage in stages:
            y = stage(y)
        assert torch.equal(y, net(x)), type(net).__name__
        # every tensor is in exactly one stage, except the GPT's tied embedding/head (first and last)
        shared = {name: where for name, where in owners(net, stages).items() if len(where) > 1}
        assert shared == (
            {"tok_embed.weight": [0, num_stages - 1], "head.weight": [0, num_stages - 1]}
            if isinstance(net, GPT)
            else {}
        )


def test_unsplittable_nets_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"BatchNorm.*use model=mlp"):
        split_net(CNN(3, (8, 8), 4), 2)
    with pytest.raises(ConfigError, match=r"declares pipeline_stages"):
        split_net(nn.Sequential(nn.Linear(2, 2)), 2)
    with pytest.raises(ConfigError, match=r"model.depth gives 2 layer runs to split into 3 pipeline stages"):
        split_net(GPT(11, 6, dim=16, depth=2, heads=2), 3)


# ---- the schedule loop on 2 gloo ranks: equal to one process --------------------------------------------------------
def _task(kind: str, stages: int = 2) -> object:
    from litforge.tasks.classification import ClassificationTask
    from litforge.tasks.language_model import LanguageModelTask

    torch.manual_seed(0)
    sgd = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.5, "momentum": 0.9}
    if kind == "gpt":  # tied embedding/head across the first and last stage; packed documents (ids passed on)
        net = {"_target_": "litforge.models.gpt.GPT", "_partial_": True, "dim": 16, "depth": max(3, stages), "heads": 2}
        return LanguageModelTask(net=net, optimizer=sgd, vocab_size=11, block_size=6, packed=True)
    layers = [8] * max(2, stages - 1)
    net = {"_target_": "litforge.models.mlp.MLP", "_partial_": True, "hidden_dims": layers, "dropout": 0.0}
    return ClassificationTask(net=net, optimizer=sgd, input_shape=[1, 4, 4], num_classes=3)


def _batch(kind: str, size: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(size)
    if kind == "gpt":
        tokens = torch.randint(0, 11, (size, 7), generator=g)
        return tokens[:, :-1], tokens[:, 1:], (torch.arange(6) >= torch.randint(1, 6, (size, 1), generator=g)).long()
    return torch.randn(size, 1, 4, 4, generator=g), torch.randint(0, 3, (size,), generator=g)


def _local(stages: list[nn.Module], places: list[int], rank: int) -> tuple[list[nn.Module], list[int], list]:
    """This rank's stages, their indices, and its tied parameters, as the strategy picks them."""
    from litforge.parallel.pipeline import rank_stages

    mine, tied = rank_stages(stages, places, rank)
    return [stages[i] for i in mine], mine, tied


def _pipeline_equals_one_process(
    rank: int, world_size: int, kind: str, schedule: str, per_rank: int = 1
) -> dict[str, float]:
    """Loss and (clipped) gradients of a pipeline pass vs the whole net on the whole batch; after 3 SGD steps, the
    weights and the training metric. `per_rank` stages on each rank, placed as the schedule places them."""
    import torch.distributed as dist

    from litforge.loops.pipeline import PipelineLoop
    from litforge.parallel.pipeline import merged_optimizer_state, net_inputs, sync_full_net
    from litforge.parallel.pipeline_split import owners, split_net, stage_places

    total = world_size * per_rank
    places = stage_places(schedule, world_size, per_rank)
    task, reference = _task(kind, total), _task(kind, total)
    stages = split_net(task.net, total)
    held = {f"net.{name}": where for name, where in owners(task.net, stages).items()}
    local, indices, tied = _local(stages, places, rank)
    # a group on every rank (creating one is a collective); tied weights across ranks only where both hold them
    tied_group = dist.new_group(list(range(world_size)))
    loop = PipelineLoop(
        task,
        local,
        indices,
        total,
        schedule,
        4,
        group=None,
        stage_ranks=places,
        tied=tied,
        tied_group=tied_group if tied else None,
        device=torch.device("cpu"),
        net_inputs=net_inputs(task),
    )
    out: dict[str, float] = {"loss": 0.0, "grad": 0.0, "weight": 0.0, "metric": 0.0, "full_net": 1.0, "optimizer": 1.0}
    opt, ref_opt = task.configure_optimizers(), reference.configure_optimizers()  # SGD with momentum (state)
    for step, size in enumerate((8, 8, 6, 8)):  # 6: a partial batch, 3 micro-batches
        if step == 3:  # a checkpoint and an exact resume: the full net and optimizer on every rank, a fresh start
            sync_full_net(task, held, places)
            out["full_net"] = max(
                (a - b).abs().max().item() for a, b in zip(task.parameters(), reference.parameters(), strict=True)
            )
            saved = {"state_dict": task.state_dict(), "optimizer": merged_optimizer_state(opt.state_dict(), world_size)}
            ref_state = ref_opt.state_dict()["state"]
            out["optimizer"] = max(
                (saved["optimizer"]["state"][k]["momentum_buffer"] - v["momentum_buffer"]).abs().max().item()
                for k, v in ref_state.items()
            )
            assert sorted(saved["optimizer"]["state"]) == sorted(ref_state)
            task = _task(kind, total)
            if kind == "mlp":  # the resumed task's metric starts afresh, so does the reference's
                reference.train_acc.reset()
            task.load_state_dict(saved["state_dict"])
            opt = task.configure_optimizers()
            opt.load_state_dict(saved["optimizer"])
            stages = split_net(task.net, total)
            local, indices, tied = _local(stages, places, rank)
            loop = PipelineLoop(
                task,
                local,
                indices,
                total,
                schedule,
                4,
                group=None,
                stage_ranks=places,
                tied=tied,
                tied_group=loop.tied_group,
                device=torch.device("cpu"),
                net_inputs=net_inputs(task),
            )
        batch = _batch(kind, size)
        opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
        _, _, losses = loop.run(batch, train=True)
        loss = torch.stack([part.detach() for part in losses]).mean()
        loop.sum_tied_gradients()
        loop.clip_gradients(0.05)  # trainer.gradient_clip_val: the norm over both stages, as one process's
        ref_loss = reference.step_loss(batch)
        ref_loss.backward()
        assert torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05) > 0.05  # it does clip
        out["loss"] = max(out["loss"], abs(loss.item() - ref_loss.item()))
        out["grad"] = max(out["grad"], _gap_to_reference(task, reference, held, indices, grads=True))
        opt.step()
        ref_opt.step()
    out["weight"] = max(out["weight"], _gap_to_reference(task, reference, held, indices, grads=False))
    if kind == "mlp":  # the training metric (since the resume): updated from the pipeline's output on every rank
        out["metric"] = abs(task.train_acc.compute().item() - reference.train_acc.compute().item())
    return out


def _gap_to_reference(
    task: torch.nn.Module, reference: torch.nn.Module, held: dict[str, list[int]], stages: list[int], grads: bool
) -> float:
    """Largest |difference| to the one-process reference over the parameters the `stages` hold (their gradients,
    which must exist, or their values)."""
    mine, gap = dict(task.named_parameters(remove_duplicate=False)), 0.0
    for name, p in reference.named_parameters(remove_duplicate=False):
        if set(stages) & set(held[name]):
            if grads:
                assert mine[name].grad is not None, name
            gap = max(gap, ((mine[name].grad - p.grad) if grads else (mine[name] - p)).abs().max().item())
    return gap


@pytest.mark.parametrize("kind", ["mlp", "gpt"])
@pytest.mark.parametrize(
    ("schedule", "per_rank"), [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2), ("zero_bubble", 2)]
)
def test_pipeline_equals_one_process_on_two_gloo_ranks(ranks, kind: str, schedule: str, per_rank: int) -> None:
    """Two stages per rank (interleaved_1f1b, zero_bubble: 4 stages on 2 ranks) as exact as one per rank; under
    zero_bubble the GPT's tied embedding and head both sit on rank 0 (its first and last stage)."""
    for result in ranks.run(_pipeline_equals_one_process, kind, schedule, per_rank, timeout=60):
        assert result["loss"] <= 1e-6 and result["grad"] <= 1e-6, result
        assert result["weight"] <= 1e-6 and result["metric"] <= 1e-6, result
        assert result["full_net"] <= 1e-6 and result["optimizer"] <= 1e-6, result  # the checkpoint, before resuming


def test_strategy_refusals_name_the_key_and_the_fix() -> None:
    from omegaconf import OmegaConf

    from litforge.config.check import check_group
    from litforge.loops.steps_per_call import EpochSchedulers
    from litforge.parallel.pipeline import Pipeline
    from litforge.tasks.classification import ClassificationTask

    target = "litforge.parallel.pipeline.Pipeline"
    with pytest.raises(ConfigError, match=r"strategy.schedule='zigzag': expected one of gpipe, 1f1b, interleaved_1f1b"):
        check_group("strategy", OmegaConf.create({"_target_": target, "schedule": "zigzag"}))
    with pytest.raises(ConfigError, match=r"strategy.stages_per_rank=0: expected an integer >= 1"):
        check_group("strategy", OmegaConf.create({"_target_": target, "stages_per_rank": 0}))
    with pytest.raises(ConfigError, match=r"schedule=zero_bubble runs exactly 2 .* pass strategy.stages_per_rank=2"):
        Pipeline(schedule="zero_bubble", stages_per_rank=3)
    with pytest.raises(ConfigError, match=r"schedule=1f1b runs one stage per rank.*schedule=interleaved_1f1b"):
        Pipeline(schedule="1f1b", stages_per_rank=2)
    with pytest.raises(ConfigError, match=r"microbatches=9 over 4 pipeline ranks .* strategy.microbatches=8"):
        Pipeline(schedule="interleaved_1f1b", stages_per_rank=2, microbatches=9).check_run(
            type("Data", (), {"batch_size": 18})(), {"devices": 4}, []
        )
    with pytest.raises(ConfigError, match=r"strategy.microbatches=0: expected an integer >= 1"):
        check_group("strategy", OmegaConf.create({"_target_": target, "microbatches": 0}))
    strategy = Pipeline(microbatches=4)
    data = type("Data", (), {"batch_size": 30})()
    with pytest.raises(ConfigError, match=r"data.batch_size=30 is not divisible by strategy.microbatches=4: .*=32"):
        strategy.check_run(data, {}, [])
    with pytest.raises(ConfigError, match=r"trainer.accumulate_grad_batches=2 under strategy=pipeline"):
        strategy.check_run(type("Data", (), {"batch_size": 32})(), {"accumulate_grad_batches": 2}, [])
    trainer_kwargs, callbacks = {"gradient_clip_val": 1.0}, []
    strategy.check_run(type("Data", (), {"batch_size": 32})(), trainer_kwargs, callbacks)
    # clipping moves into the loop (Lightning refuses it under manual optimization); the stages read one order
    assert strategy.clip_val == 1.0 and "gradient_clip_val" not in trainer_kwargs
    assert trainer_kwargs["use_distributed_sampler"] is False
    assert [type(cb) for cb in callbacks] == [EpochSchedulers]
    sgd = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}
    cnn = {"_target_": "litforge.models.cnn.CNN", "_partial_": True}
    with pytest.raises(ConfigError, match=r"strategy=pipeline cannot split CNN: its BatchNorm"):
        strategy.check_task(ClassificationTask(net=cnn, optimizer=sgd, input_shape=[1, 8, 8], num_classes=3))
    mlp = {"_target_": "litforge.models.mlp.MLP", "_partial_": True}
    with pytest.raises(ConfigError, match=r"pass task.mix=none"):
        strategy.check_task(
            ClassificationTask(net=mlp, optimizer=sgd, input_shape=[1, 8, 8], num_classes=3, mix="mixup")
        )


QUIET = [
    "trainer=cpu",
    "callbacks.model_summary=null",
    "logger=csv",
    "print_config=false",
    "callbacks.progress_bar=null",
    "model=mlp",
    "model.dropout=0",
    "trainer.max_epochs=1",
    "+trainer.limit_train_batches=4",
    "+trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
]


@pytest.mark.slow
@pytest.mark.distributed
def test_two_stages_per_rank_cli_trains_like_one_process(tmp_path: Path) -> None:
    """`strategy.schedule=zero_bubble strategy.stages_per_rank=2 trainer.devices=2` on a 4-layer MLP: the strategy's
    own stage placement (a V: rank 0 runs the first and last layer), and the metrics of a one-process run."""
    layers = ["model.hidden_dims=[32,32,32]"]
    piped = run_cli(
        "train.py",
        *QUIET,
        *layers,
        "strategy=pipeline",
        "strategy.schedule=zero_bubble",
        "strategy.stages_per_rank=2",
        "trainer.devices=2",
        log_dir=tmp_path / "pipe",
        timeout=300,
    )
    assert piped.returncode == 0, piped.output[-3000:]
    alone = run_cli("train.py", *QUIET, *layers, "trainer.devices=1", log_dir=tmp_path / "one", timeout=300)
    assert alone.returncode == 0, alone.output[-3000:]
    pipe_metrics = read_metrics(single_run(tmp_path / "pipe"))["metrics"]
    one_metrics = read_metrics(single_run(tmp_path / "one"))["metrics"]
    for key in ("train/acc", "val/loss", "val/acc", "test/loss", "test/acc"):
        assert pipe_metrics[key] == pytest.approx(one_metrics[key], abs=1e-6), (key, pipe_metrics, one_metrics)


@pytest.mark.slow
@pytest.mark.distributed
def test_pipeline_cli_trains_like_one_process_and_eval_reads_its_checkpoint(tmp_path: Path) -> None:
    """`python train.py strategy=pipeline trainer.devices=2 model=mlp`: the metrics of a one-process run (the
    same batches, losses and weights), and eval.py on its single-file checkpoint reproduces its test metrics."""
    piped = run_cli(
        "train.py", *QUIET, "strategy=pipeline", "trainer.devices=2", log_dir=tmp_path / "pipe", timeout=300
    )
    assert piped.returncode == 0, piped.output[-3000:]
    alone = run_cli("train.py", *QUIET, "trainer.devices=1", log_dir=tmp_path / "one", timeout=300)
    assert alone.returncode == 0, alone.output[-3000:]
    run = single_run(tmp_path / "pipe")
    pipe_metrics, one_metrics = read_metrics(run)["metrics"], read_metrics(single_run(tmp_path / "one"))["metrics"]
    for key in ("train/acc", "val/loss", "val/acc", "test/loss", "test/acc"):
        assert pipe_metrics[key] == pytest.approx(one_metrics[key], abs=1e-6), (key, pipe_metrics, one_metrics)
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert set(checkpoint["state_dict"]) == {
        f"net.{k}" for k in ("net.1.weight", "net.1.bias", "net.3.weight", "net.3.bias", "net.5.weight", "net.5.bias")
    }
    evaluated = run_cli(
        "eval.py",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        "+trainer.limit_test_batches=2",
        log_dir=tmp_path / "eval",
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.output[-3000:]
    eval_metrics = read_metrics(single_run(tmp_path / "eval", "eval"))["metrics"]
    assert eval_metrics["test/acc"] == pytest.approx(pipe_metrics["test/acc"], abs=1e-6), eval_metrics


def test_the_pipeline_strategy_runs_the_steps_and_the_task_keeps_its_own_methods() -> None:
    """What runs is what the classes say: Lightning calls the pipeline strategy's training/validation/test steps
    (its own extension points), and the loop assigns no method onto the task; the pipeline's output reaches the
    task's own forward through a stand-in net, and the net is back afterwards."""
    from types import SimpleNamespace

    from litforge.loops.pipeline import GivenOutput, PipelineLoop, given_output
    from litforge.parallel.pipeline import Pipeline

    task = _task("mlp")
    PipelineLoop.install(SimpleNamespace(task=task, dp_group=None))  # type: ignore[arg-type]
    assert task.automatic_optimization is False
    assert not {"training_step", "validation_step", "test_step", "forward"} & set(vars(task))
    assert {"training_step", "validation_step", "test_step"} <= set(vars(Pipeline))
    net, output = task.net, torch.zeros(5, 3)
    with given_output(task, output):
        assert isinstance(task.net, GivenOutput) and task(torch.ones(5, 1, 4, 4)) is output
    assert task.net is net and "forward" not in vars(task)
