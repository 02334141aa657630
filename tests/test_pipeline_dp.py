"""strategy=pipeline with strategy.data_parallel=2 on 4 gloo ranks (2 stages x 2 replicas): equal to one process on
the whole batch; and the layout, the sampler's share and the refusals."""

from __future__ import annotations

import pytest
import torch

from litforge.core.errors import ConfigError
from test_pipeline import _batch, _gap_to_reference, _task

GLOO_WORLD_SIZE = 4  # the `ranks` fixture (conftest): 2 pipeline stages x 2 data-parallel replicas


def _pipeline_dp_equals_one_process(rank: int, world_size: int, kind: str, schedule: str) -> dict[str, float]:
    """Each replica runs its half of a global batch through its 2-stage pipeline (the strategy's own layout,
    gradients averaged over the replicas); the loss, (clipped) gradients, weights after 2 SGD-with-momentum steps,
    the training metric and the checkpoint's whole net and merged optimizer state vs one process on the whole batch."""
    from litforge.loops.pipeline import PipelineLoop
    from litforge.parallel.pipeline import (
        merged_optimizer_state,
        net_inputs,
        pipeline_layout,
        sync_full_net,
        tied_groups,
    )
    from litforge.parallel.pipeline_split import owners, split_net

    replicas = 2
    layout = pipeline_layout(world_size, replicas, rank, "cpu")
    task, reference = _task(kind), _task(kind)
    stages = split_net(task.net, world_size // replicas)
    held = {f"net.{name}": where for name, where in owners(task.net, stages).items()}
    tied = [
        p for p in stages[layout.stage].parameters() if sum(any(p is q for q in s.parameters()) for s in stages) > 1
    ]
    holders = sorted({i for where in held.values() if len(where) > 1 for i in where})
    loop = PipelineLoop(
        task,
        stages[layout.stage],
        layout.stage,
        len(stages),
        schedule,
        4,
        group=layout.pp_group,
        stage_ranks=layout.stage_ranks,
        tied=tied,
        tied_group=tied_groups(layout, holders, replicas),
        device=torch.device("cpu"),
        net_inputs=net_inputs(task),
        dp_group=layout.dp_group,
    )
    loop.install()  # the metrics now sync over the replicas
    out = {"loss": 0.0, "grad": 0.0, "weight": 0.0, "metric": 0.0, "full_net": 0.0, "optimizer": 0.0}
    opt, ref_opt = task.configure_optimizers(), reference.configure_optimizers()
    for _ in range(2):
        batch = _batch(kind, 16)  # the global batch; this replica's half is what its sampler would hand it
        mine_part = tuple(t[layout.replica * 8 : (layout.replica + 1) * 8] for t in batch)
        opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
        _, _, losses = loop.run(mine_part, train=True)
        loss = loop.global_loss(losses)
        loop.average_gradients()
        loop.sum_tied_gradients()
        loop.clip_gradients(0.05)
        ref_loss = reference.step_loss(batch)
        ref_loss.backward()
        assert torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05) > 0.05  # it does clip
        out["loss"] = max(out["loss"], abs(loss.item() - ref_loss.item()))
        out["grad"] = max(out["grad"], _gap_to_reference(task, reference, held, [layout.stage], grads=True))
        opt.step()
        ref_opt.step()
    out["weight"] = max(out["weight"], _gap_to_reference(task, reference, held, [layout.stage], grads=False))
    if kind == "mlp":  # each rank updated train_acc on its replica's half; compute() syncs over the replicas
        task.flush_train_predictions()
        reference.flush_train_predictions()
        out["metric"] = abs(task.train_acc.compute().item() - reference.train_acc.compute().item())
    # a checkpoint: the whole net and the merged optimizer state on every rank, as rank 0 writes them
    sync_full_net(task, held, layout.stage_ranks, layout.pp_group)
    out["full_net"] = max(
        (a - b).abs().max().item() for a, b in zip(task.parameters(), reference.parameters(), strict=True)
    )
    merged = merged_optimizer_state(opt.state_dict(), len(stages), layout.pp_group)["state"]
    ref_state = ref_opt.state_dict()["state"]
    assert sorted(merged) == sorted(ref_state)
    out["optimizer"] = max(
        (merged[k]["momentum_buffer"] - v["momentum_buffer"]).abs().max().item() for k, v in ref_state.items()
    )
    return {**out, "stage": layout.stage, "replica": layout.replica, "stage_ranks": layout.stage_ranks}


@pytest.mark.parametrize(("kind", "schedule"), [("mlp", "1f1b"), ("gpt", "gpipe")])
def test_pipeline_x_data_parallel_equals_one_process_on_four_gloo_ranks(ranks, kind: str, schedule: str) -> None:
    results = ranks.run(_pipeline_dp_equals_one_process, kind, schedule, timeout=90)
    # pipeline outermost: rank = stage * 2 + replica; replica r's pipeline is ranks [r, 2 + r]
    assert [(r["stage"], r["replica"], r["stage_ranks"]) for r in results] == [
        (0, 0, [0, 2]),
        (0, 1, [1, 3]),
        (1, 0, [0, 2]),
        (1, 1, [1, 3]),
    ]
    for result in results:
        assert result["loss"] <= 1e-6 and result["grad"] <= 1e-6, result
        assert result["weight"] <= 1e-6 and result["metric"] <= 1e-6, result
        assert result["full_net"] <= 1e-6 and result["optimizer"] <= 1e-6, result


def test_data_parallel_reads_its_share_and_refuses_indivisible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf

    from litforge.config.check import check_group
    from litforge.parallel.pipeline import Pipeline

    with pytest.raises(ConfigError, match=r"strategy.data_parallel=0: expected an integer >= 1"):
        check_group(
            "strategy", OmegaConf.create({"_target_": "litforge.parallel.pipeline.Pipeline", "data_parallel": 0})
        )
    strategy = Pipeline(data_parallel=2, microbatches=4)
    data = type("Data", (), {"batch_size": 8})()
    with pytest.raises(
        ConfigError,
        match=r"trainer.devices gives 3 processes, not divisible by "
        r"strategy.data_parallel=2: .* e.g. trainer.devices=4$",
    ):
        strategy.check_run(data, {"devices": 3}, [])
    strategy.check_run(data, {"devices": 3, "num_nodes": 2}, [])  # 6 processes: 3 stages x 2 replicas
    trainer_kwargs: dict = {"devices": 4}
    strategy.check_run(data, trainer_kwargs, [])
    assert trainer_kwargs["use_distributed_sampler"] is True  # plain DataLoaders get Lightning's sampler, as in DDP
    monkeypatch.setattr(Pipeline, "global_rank", property(lambda self: 3))  # stage 1, replica 1: the share is over
    # the replicas only
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 1}
    single: dict = {"devices": 2}
    Pipeline().check_run(data, single, [])
    assert single["use_distributed_sampler"] is False


@pytest.mark.slow
@pytest.mark.distributed
def test_pipeline_x_data_parallel_cli_trains_like_ddp(tmp_path) -> None:
    """`python train.py strategy=pipeline trainer.devices=4 strategy.data_parallel=2`: the 2 replicas read what
    `strategy=ddp trainer.devices=2` reads, so the metrics, the checkpoint's weights and its (merged) optimizer state
    are DDP's; a process count not divisible by data_parallel stops in one line."""
    from conftest import read_metrics, run_cli, single_run
    from test_pipeline import QUIET

    piped = run_cli(
        "train.py",
        *QUIET,
        "strategy=pipeline",
        "trainer.devices=4",
        "strategy.data_parallel=2",
        log_dir=tmp_path / "pipe",
        timeout=300,
    )
    assert piped.returncode == 0, piped.output[-3000:]
    ddp = run_cli("train.py", *QUIET, "strategy=ddp", "trainer.devices=2", log_dir=tmp_path / "ddp", timeout=300)
    assert ddp.returncode == 0, ddp.output[-3000:]
    runs = single_run(tmp_path / "pipe"), single_run(tmp_path / "ddp")
    pipe_metrics, ddp_metrics = (read_metrics(run)["metrics"] for run in runs)
    for key in ("train/acc", "val/loss", "val/acc", "test/loss", "test/acc"):
        assert pipe_metrics[key] == pytest.approx(ddp_metrics[key], abs=1e-6), (key, pipe_metrics, ddp_metrics)
    pipe_ckpt, ddp_ckpt = (torch.load(run / "checkpoints" / "last.ckpt", weights_only=True) for run in runs)
    for name, tensor in ddp_ckpt["state_dict"].items():
        assert torch.allclose(pipe_ckpt["state_dict"][name], tensor, atol=1e-6), name
    pipe_opt, ddp_opt = pipe_ckpt["optimizer_states"][0]["state"], ddp_ckpt["optimizer_states"][0]["state"]
    assert sorted(pipe_opt) == sorted(ddp_opt)
    for index, state in ddp_opt.items():
        assert torch.allclose(pipe_opt[index]["exp_avg"], state["exp_avg"], atol=1e-6), index
    bad = run_cli(
        "train.py",
        *QUIET,
        "strategy=pipeline",
        "trainer.devices=3",
        "strategy.data_parallel=2",
        log_dir=tmp_path / "bad",
        timeout=120,
    )
    assert bad.returncode != 0
    errors = [line for line in bad.output.splitlines() if line.startswith("litforge: error:")]
    assert len(errors) == 1 and "trainer.devices=3" in errors[0], bad.output
    assert "not divisible by strategy.data_parallel=2" in errors[0] and "e.g. trainer.devices=2" in errors[0]
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").rglob("*.yaml")), "refused before a run"
    assert "Traceback" not in bad.output
