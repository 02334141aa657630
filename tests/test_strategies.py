"""Strategies (conf/strategy/): unit tests of the plans and options, and real multi-process runs on CPU with gloo.

The multi-process tests run the real CLI (Lightning re-launches the script per rank) on tiny models; probes from
tests/dist_probes.py record what each rank saw.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY, read_metrics, run_cli, run_dirs, single_run

TINY_VIT = ["model=vit", "model.dim=32", "model.depth=2", "model.heads=2", "model.patch_size=4"]
QUIET = ["trainer=cpu", "callbacks.model_summary=null", "logger=csv"]


def _probe(out: Path) -> list[str]:
    return ["+callbacks.probe._target_=tests.dist_probes.Record", f"+callbacks.probe.out={out}"]


def _ranks(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- fast: no extra processes -------------------------------------------------------------------------------------
def test_lr_scaling_by_data_parallel_replicas():
    from litforge.core.errors import ConfigError
    from litforge.tasks.task import scale_learning_rate

    for scaling, expected in (("none", 0.1), ("linear", 0.4), ("sqrt", 0.2)):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        scale_learning_rate(opt, scaling, replicas=4)
        assert opt.param_groups[0]["lr"] == pytest.approx(expected)
    with pytest.raises(ConfigError, match="lr_scaling"):
        scale_learning_rate(opt, "quadratic", replicas=4)


def test_every_net_declares_sharding_units_and_tp_needs_a_transformer():
    from litforge.core.errors import ConfigError
    from litforge.models.cnn import CNN
    from litforge.models.mlp import MLP
    from litforge.models.resnet import ResNet
    from litforge.models.vit import VisionTransformer
    from litforge.parallel.plans import apply_tensor_parallel, sharding_units, tensor_parallel_plan

    shape = {"in_channels": 1, "image_size": (8, 8), "num_classes": 10}
    nets = {"mlp": MLP(**shape), "cnn": CNN(**shape), "resnet": ResNet(**shape), "vit": VisionTransformer(**shape)}
    expected_units = {"mlp": 3, "cnn": 4, "resnet": 4, "vit": 4}
    for name, net in nets.items():
        units = sharding_units(net)
        assert len(units) == expected_units[name], name
        assert all(any(True for _ in u.parameters()) for u in units)
    plan = tensor_parallel_plan(nets["vit"])  # 6 projections split per block, 4 blocks
    assert len(plan) == 24 and plan["blocks.3.attn.q"] == "colwise" and plan["blocks.3.mlp.fc2"] == "rowwise"
    with pytest.raises(ConfigError, match="tensor_parallel_plan"):
        apply_tensor_parallel(nets["mlp"], mesh=None)


def test_a_torchrun_job_over_nodes_that_may_restart_needs_a_fresh_store_per_restart():
    """Over several nodes the restart counts differ after a restart (the node whose worker died counts 1, the other
    may count 0), so litforge's per-restart prefix on the shared store would split the nodes (a hang, seen in
    tests/test_multinode.py): refused at start, naming torch's opt-out, which tests/test_multinode.py runs with."""
    from litforge.core.errors import ConfigError
    from litforge.parallel.elastic import check_restartable_across_nodes, under_torchrun

    shared = {"TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    with pytest.raises(ConfigError, match="over 2 nodes with --max-restarts=1 .* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        check_restartable_across_nodes({**shared, "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "1"})
    for fine in (
        {**shared, "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_MAX_RESTARTS": "3"},  # one node: one agent counts
        {**shared, "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "0"},  # no restart: only the first round
        {**shared, "TORCHELASTIC_USE_AGENT_STORE": "False", "GROUP_WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "1"},
    ):
        check_restartable_across_nodes(fine)
    assert not under_torchrun({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"})  # the opt-out: Lightning inits


def test_rank_zero_helpers_follow_the_launcher_environment(monkeypatch):
    from litforge.parallel.launch import config_flags
    from litforge.runtime.ranks import is_rank_zero

    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert is_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "1")  # Lightning's launcher on the second node
    assert not is_rank_zero()
    monkeypatch.setenv("RANK", "0")  # torchrun's global rank wins
    assert is_rank_zero()
    assert config_flags(["-m", "--config-name", "x", "seed=1", "-cp=conf"]) == ["--config-name", "x", "-cp=conf"]


def test_tpu_without_torch_xla_fails_with_a_clear_message(compose_cfg):
    from litforge.core.errors import ConfigError
    from litforge.core.instantiate import instantiate_group
    from litforge.parallel.fit_trainer import build_strategy
    from litforge.runtime.devices import build_trainer

    cfg = compose_cfg("strategy=tpu")
    assert cfg.trainer.accelerator == "tpu" and cfg.trainer.devices == 8 and cfg.strategy.name == "xla"
    with pytest.raises(ConfigError, match="torch_xla"):
        build_trainer(instantiate_group("trainer", cfg.trainer), strategy=build_strategy(cfg.strategy), logger=False)


def test_sync_batchnorm_on_cpu_fails_with_a_clear_message():
    from litforge.core.errors import ConfigError
    from litforge.runtime.devices import build_trainer

    with pytest.raises(ConfigError, match="sync_batchnorm"):
        build_trainer({"accelerator": "cpu", "devices": 2, "sync_batchnorm": True}, strategy="ddp", logger=False)


def test_trainer_ddp_on_a_cpu_machine_is_gloo_ddp_without_synced_batchnorm(compose_cfg, monkeypatch):
    """lightning-hydra-template's `trainer=ddp trainer.devices=2` was refused on CPU ("No supported gpu backend
    found"); it builds the Trainer `strategy=ddp` builds there (2 gloo processes; the run: test_reliability's
    `strategy.name=ddp`), and on a GPU machine keeps its synced BatchNorm."""
    from types import SimpleNamespace

    import torch
    from pytorch_lightning.accelerators import CPUAccelerator
    from pytorch_lightning.strategies import DDPStrategy

    from litforge.config.check import check_config
    from litforge.core.instantiate import instantiate_group
    from litforge.parallel.fit_trainer import build_strategy
    from litforge.runtime import devices

    cfg = compose_cfg("trainer=ddp", "trainer.devices=2")
    check_config(cfg)
    trainer = devices.build_trainer(
        instantiate_group("trainer", cfg.trainer), strategy=build_strategy(cfg.strategy), logger=False
    )
    assert isinstance(trainer.strategy, DDPStrategy) and isinstance(trainer.accelerator, CPUAccelerator)
    assert trainer.num_devices == 2 and trainer.strategy._get_process_group_backend() == "gloo"
    assert trainer.strategy._layer_sync is None  # no SyncBatchNorm conversion (torch refuses it on CPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    synced = {}
    monkeypatch.setattr(devices.pl, "Trainer", lambda **kwargs: synced.update(kwargs) or SimpleNamespace(accelerator=0))
    devices.build_trainer({"accelerator": "auto", "devices": 2, "sync_batchnorm": "auto"}, logger=False)
    assert synced["sync_batchnorm"] is True


def test_slurm_trainer_requeues_and_launcher_configs_compose(compose_cfg):
    from hydra.utils import instantiate
    from lightning_fabric.plugins.environments import SLURMEnvironment

    cfg = compose_cfg("trainer=slurm")
    atomic, plugin = instantiate(cfg.trainer.plugins)
    # Lightning's in-handler requeue is off: litforge's pre-emption path saves and requeues (tests/test_preemption.py)
    assert isinstance(plugin, SLURMEnvironment) and not plugin.auto_requeue


# ---- multi-process runs -------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_two_ranks_equal_one_process_on_the_same_global_batch(tmp_path: Path):
    """Real `strategy=ddp`: one run folder, one set of checkpoints, rank-0-only files, and DDP's weights == 1 process
    (the DDP run with activation_checkpointing=full, which must not change them)."""
    common = [*TINY, *QUIET, "model.dropout=0.0", "callbacks.early_stopping=null", "trainer.max_epochs=1"]
    single = run_cli("train.py", *common, "data.batch_size=32", log_dir=tmp_path / "one", timeout=300)
    assert single.returncode == 0, single.output[-3000:]
    ddp = run_cli(
        "train.py",
        *common,
        "strategy=ddp",
        "trainer.devices=2",
        "data.batch_size=16",
        "activation_checkpointing=full",  # recomputing the MLP's layers changes nothing but memory
        log_dir=tmp_path / "ddp",
        timeout=300,
    )
    assert ddp.returncode == 0, ddp.output[-3000:]
    assert "sync_dist=True" not in ddp.output, "Lightning's warning: a litforge epoch-level value not reduced"

    run = single_run(tmp_path / "ddp")  # exactly one run folder
    files = sorted(p.name for p in run.iterdir() if p.name != "provenance.diff")  # that one: dirty trees only
    assert files == [".hydra", "checkpoints", "csv", "metrics.json", "provenance.json", "train.log"]
    assert len(list((run / "checkpoints").glob("epoch*.ckpt"))) == 1 and (run / "checkpoints" / "last.ckpt").is_file()
    assert "test/acc" in read_metrics(run)["metrics"]
    weights = [
        torch.load(single_run(tmp_path / d) / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for d in ("one", "ddp")
    ]
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        torch.testing.assert_close(weights[1][key], weights[0][key], atol=2e-5, rtol=1e-4, msg=key)


@pytest.mark.distributed
def test_single_rank_fsdp_tests_from_its_best_checkpoint(tmp_path: Path):
    """`strategy=fsdp trainer.devices=1` (one GPU): FSDP2 runs over a 1-rank mesh, so the sharded checkpoint holds
    DTensor weights and the final trainer.test(ckpt_path=best) loads it. Before, the net stayed unsharded on one rank
    and Lightning's loader refused ("Could not find a distributed model"): found by benchmarks/gpu_smoke.py on an
    H200."""
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        *TINY_VIT,
        "trainer.max_epochs=1",
        "strategy=fsdp",
        "trainer.devices=1",
        log_dir=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.output[-3000:]
    run = single_run(tmp_path)
    assert "test/acc" in read_metrics(run)["metrics"]
    assert (run / "checkpoints" / "last.ckpt").is_dir()  # sharded (a folder of shards), as with more ranks


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_spawn_trains_two_ranks_into_one_run_folder(tmp_path: Path):
    """`strategy=ddp_spawn`: ranks spawned from the running process; one folder, one set of checkpoints, a test
    metric."""
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        "trainer.max_epochs=1",
        "strategy=ddp_spawn",
        "trainer.devices=2",
        log_dir=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.output[-3000:]
    run = single_run(tmp_path)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert len(list((run / "checkpoints").glob("epoch*.ckpt"))) == 1
    assert "test/acc" in read_metrics(run)["metrics"]


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_inside_a_multirun_keeps_one_folder_per_job(tmp_path: Path):
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        "trainer.max_epochs=1",
        "strategy=ddp",
        "trainer.devices=2",
        "seed=1,2",
        log_dir=tmp_path,
        timeout=400,
        extra_args=("-m",),
    )
    assert result.returncode == 0, result.output[-3000:]
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()  # the ranks started no sweep of their own
    assert not (tmp_path / "train" / "runs").exists()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        assert "test/acc" in read_metrics(sweep / job)["metrics"]


@pytest.mark.slow
@pytest.mark.distributed
def test_a_rank_that_raises_ends_the_whole_job_quickly(tmp_path: Path):
    start = time.time()
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        "strategy=ddp",
        "trainer.devices=2",
        "+callbacks.fault._target_=tests.dist_probes.RaiseOnRank",
        f"+callbacks.fault.out={tmp_path}",
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    ended = time.time()
    assert result.returncode != 0
    raised_at = float((tmp_path / "raised_at").read_text())
    assert start < raised_at < ended and ended - raised_at < 60, f"job ended {ended - raised_at:.0f} s after the error"


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp_shards_trains_consolidates_and_resumes_as_tensor_parallel(tmp_path: Path):
    """FSDP2 over 2 ranks: each holds ~half the elements, loss falls, the merged file predicts like the sharded model;
    the sharded checkpoint then resumes under tensor parallelism (torch distributed checkpoints reshard on load).
    With activation_checkpointing=selective and strategy.reshard_after_forward=false (units stay gathered until
    backward); the tensor-parallel resume with activation_checkpointing=full."""
    from litforge.checkpointing.load import load_checkpoint
    from litforge.tasks.restore import restore_task

    common = [*TINY, *QUIET, *TINY_VIT, "trainer.devices=2", "trainer.limit_train_batches=6"]
    fsdp = run_cli(
        "train.py",
        *common,
        "strategy=fsdp",
        *_probe(tmp_path / "fsdp"),
        "optimizer.lr=3e-3",
        "activation_checkpointing=selective",
        "strategy.reshard_after_forward=false",
        "trainer.num_sanity_val_steps=0",  # a no-grad forward would leave the weights gathered (below)
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    assert fsdp.returncode == 0, fsdp.output[-3000:]
    ranks = _ranks(tmp_path / "fsdp", 2)
    for rank in ranks:
        assert 0.4 < rank["local_numel"] / rank["total_numel"] < 0.6
        assert rank["sharded_before_backward"] == 0  # reshard_after_forward=false kept every unit gathered
    losses = ranks[0]["losses"]
    assert sum(losses[-3:]) < sum(losses[:3]), losses

    run = single_run(tmp_path / "logs")
    last = run / "checkpoints" / "last.ckpt"
    assert (last / ".metadata").is_file()  # a sharded folder, one file per rank
    task = restore_task(load_checkpoint(last), str(last))  # what eval/predict do: merge the shards, load
    assert (run / "checkpoints" / "last.consolidated.ckpt").is_file()
    inputs = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(task(inputs), torch.tensor(ranks[0]["logits"]), atol=1e-5, rtol=1e-5)

    # the consolidated file deploys like any checkpoint: ONNX export with its parity check on the test split
    consolidated = run / "checkpoints" / "last.consolidated.ckpt"
    export = run_cli(
        "export.py",
        f"ckpt_path={consolidated}",
        "quantize=[]",
        "report.rounds=1",
        "report.threads=[1]",
        "report.batch_sizes=[1]",
        log_dir=tmp_path / "export",
        timeout=300,
    )
    assert export.returncode == 0, export.output[-3000:]
    assert "ONNX parity" in export.output and (single_run(tmp_path / "export", "export") / "model.onnx").is_file()

    tp = run_cli(
        "train.py",
        *common,
        "strategy=tp",
        f"ckpt_path={last}",
        "trainer.max_epochs=3",
        "activation_checkpointing=full",
        *_probe(tmp_path / "tp"),
        log_dir=tmp_path / "resumed",
        timeout=300,
    )
    assert tp.returncode == 0, tp.output[-3000:]
    resumed = _ranks(tmp_path / "tp", 2)
    assert len(resumed[0]["losses"]) == 6  # only the third epoch ran: epochs 1-2 came from the checkpoint
    assert resumed[0]["local_numel"] < resumed[0]["total_numel"]  # attention/MLP weights split across the 2 ranks
    assert resumed[0]["losses"] == pytest.approx(resumed[1]["losses"])  # TP ranks compute one model on one batch
    assert "test/acc" in read_metrics(single_run(tmp_path / "resumed"))["metrics"]


@pytest.mark.slow
@pytest.mark.distributed
def test_2d_data_and_tensor_parallel_on_4_processes(tmp_path: Path):
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        *TINY_VIT,
        "strategy=fsdp_tp",
        "trainer.devices=4",
        "trainer.max_epochs=1",
        *_probe(tmp_path / "probe"),
        log_dir=tmp_path / "logs",
        timeout=400,
    )
    assert result.returncode == 0, result.output[-3000:]
    ranks = _ranks(tmp_path / "probe", 4)
    for rank in ranks:  # ~1/4 of the blocks (split 2 ways by TP, then 2 ways by FSDP), embeddings/head 1/2 by FSDP
        assert rank["local_numel"] / rank["total_numel"] < 0.35
    # ranks 0,1 form one tensor-parallel group (same batch), 2,3 the other (the other half of the global batch)
    assert ranks[0]["losses"] == pytest.approx(ranks[1]["losses"]) and ranks[2]["losses"] == pytest.approx(
        ranks[3]["losses"]
    )
    assert ranks[0]["losses"] != pytest.approx(ranks[2]["losses"])
    assert "test/acc" in read_metrics(single_run(tmp_path / "logs"))["metrics"]


@pytest.mark.slow
@pytest.mark.distributed
def test_local_sgd_ranks_drift_between_averages_and_meet_at_each(tmp_path: Path):
    period = 3
    result = run_cli(
        "train.py",
        *TINY,
        *QUIET,
        "strategy=local_sgd",
        f"strategy.period={period}",
        "trainer.devices=2",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=7",
        "model.dropout=0.0",
        *_probe(tmp_path / "probe"),
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    assert result.returncode == 0, result.output[-3000:]
    a, b = (rank["fingerprints"] for rank in _ranks(tmp_path / "probe", 2))
    assert len(a) == 7
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        averaged = step % period == 0  # torch's PeriodicModelAverager averages at its steps 0, period, 2*period, ...
        assert (abs(x - y) < 1e-6 * max(1.0, abs(x))) == averaged, (step, x, y)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_nodes_with_torchrun_share_one_run(tmp_path: Path):
    """Two torchrun launchers (one per simulated node) on the loopback address; the run folder is given explicitly."""
    port = _free_port()
    run_dir = tmp_path / "logs" / "train" / "runs" / "two-nodes"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                str(ROOT / "train.py"),
                *TINY,
                *QUIET,
                "trainer.max_epochs=1",
                "strategy=ddp",
                "trainer.num_nodes=2",
                "trainer.devices=1",
                f"paths.log_dir={tmp_path / 'logs'}",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert run_dirs(tmp_path / "logs") == [run_dir]
    metrics = read_metrics(run_dir)
    assert "test/acc" in metrics["metrics"]
    assert "world_size" not in metrics  # sanity: metrics.json written once, by global rank 0
    files = sorted(p.name for p in run_dir.iterdir() if p.name != "provenance.diff")  # that one: dirty trees only
    assert files == [".hydra", "checkpoints", "csv", "metrics.json", "provenance.json", "train.log"]


@pytest.mark.slow
def test_sweep_through_the_submitit_local_launcher(tmp_path: Path):
    result = run_cli(
        "train.py",
        "hydra/launcher=local",
        *TINY,
        *QUIET,
        "trainer.max_epochs=1",
        "seed=1",
        log_dir=tmp_path,
        timeout=300,
        extra_args=("-m",),
    )
    assert result.returncode == 0, result.output[-3000:]
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()
    assert "test/acc" in read_metrics(sweep / "0")["metrics"]
    assert list(sweep.glob(".submitit/*/*_result.pkl"))  # the job really went through submitit
    assert (sweep / "summary.csv").is_file()


# ---- FSDP2 options (strategy=fsdp|fsdp_tp) ---------------------------------------------------------------------------
def test_fsdp_option_rules_and_the_offload_refusal_on_a_cpu_only_machine(compose_cfg):
    from litforge.config.check import check_config
    from litforge.core.errors import ConfigError
    from litforge.parallel.fit_trainer import build_strategy

    for bad, message in (
        ("strategy.mixed_precision=fp8", r"mixed_precision='fp8'.*e.g. strategy.mixed_precision=bf16"),
        ("strategy.reshard_after_forward=maybe", "strategy.reshard_after_forward='maybe'"),
        ("strategy.offload=disk", r"strategy.offload='disk': expected cpu or null"),
    ):
        with pytest.raises(ConfigError, match=message):
            check_config(compose_cfg("strategy=fsdp", bad))
    cfg = compose_cfg("strategy=fsdp_tp", "strategy.mixed_precision=bf16", "strategy.reshard_after_forward=false")
    strategy = build_strategy(cfg.strategy)
    kwargs = strategy.fsdp_kwargs()
    assert kwargs["reshard_after_forward"] is False and kwargs["mp_policy"].param_dtype == torch.bfloat16
    assert kwargs["mp_policy"].reduce_dtype == torch.float32 and "offload_policy" not in kwargs
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="strategy.offload=cpu .* needs CUDA GPUs; .*use strategy.offload=null"):
            build_strategy(compose_cfg("strategy=fsdp", "strategy.offload=cpu").strategy)

    from litforge.parallel.plans import shard

    class Ranks:  # a mesh dimension of a given size
        def __init__(self, n: int) -> None:
            self.n = n

        def size(self) -> int:
            return self.n

    # fsdp_tp with one data-parallel rank: FSDP2 does not run (tensor parallelism only), so its options would do nothing
    with pytest.raises(ConfigError, match="act on FSDP2, which runs only over more than one data-parallel rank"):
        shard(torch.nn.Linear(2, 2), {"tensor_parallel": Ranks(2), "data_parallel": Ranks(1)}, kwargs)


@pytest.mark.distributed
def test_fsdp_options_and_activation_checkpointing_on_two_ranks_match_one_process(tmp_path: Path):
    """FSDP2 and tensor parallelism with 2 gloo ranks (no CLI): gradients equal one process on the whole
    batch; activation checkpointing (under both) and reshard_after_forward=false change nothing (1e-6); bf16 computes
    in bf16, reduces in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from gloo import start_ranks

    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)  # mixed_precision=bf16
    variants = {
        "plain": ({}, "none"),
        "ac_full": ({}, "full"),
        "ac_selective": ({}, "selective"),
        "keep_gathered": ({"reshard_after_forward": False}, "none"),
        "bf16": ({"mp_policy": bf16}, "none"),
        "tp": ({"tensor_parallel": True}, "none"),
        "tp_ac_full": ({"tensor_parallel": True}, "full"),
    }
    start_ranks(_fsdp_options_rank, (2, _free_port(), str(tmp_path), variants), nprocs=2)
    record = torch.load(tmp_path / "fsdp_options.pt", weights_only=True)
    reference = record["reference"]
    for name, grad in reference.items():
        torch.testing.assert_close(record["plain"]["grads"][name], grad, atol=1e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(record["tp"]["grads"][name], grad, atol=1e-6, rtol=1e-5, msg=f"tp: {name}")
        for variant, same_as in (
            ("ac_full", "plain"),
            ("ac_selective", "plain"),
            ("keep_gathered", "plain"),
            ("tp_ac_full", "tp"),
        ):
            torch.testing.assert_close(
                record[variant]["grads"][name],
                record[same_as]["grads"][name],
                atol=1e-6,
                rtol=0,
                msg=f"{variant}: {name}",
            )
    flat = torch.cat([g.flatten() for g in reference.values()])
    flat_bf16 = torch.cat([record["bf16"]["grads"][n].flatten() for n in reference])
    assert 0 < float((flat_bf16 - flat).norm() / flat.norm()) < 0.05  # bf16 rounding: close, not equal
    assert record["plain"]["sharded_after_forward"] and not record["keep_gathered"]["sharded_after_forward"]
    assert record["plain"]["compute_dtype"] == "torch.float32" and record["bf16"]["compute_dtype"] == "torch.bfloat16"
    assert record["bf16"]["grad_dtype"] == "torch.float32" and record["bf16"]["output_dtype"] == "torch.float32"


def _fsdp_options_rank(rank: int, *args: object) -> None:
    from sharded_probes import fsdp_options

    fsdp_options(rank, *args)


@pytest.mark.distributed
def test_hsdp_on_four_ranks_shards_in_pairs_and_matches_one_process(tmp_path: Path):
    """strategy=hsdp's sharding (litforge.parallel.plans.shard with replicate_size=2) on 4 gloo ranks: a 2 x 2
    (replicate, shard) mesh, half of each weight per rank, replicas identical, and after three SGD-momentum steps the
    same parameters as one process on the whole batch (= DDP's result) within 1e-5."""
    from gloo import start_ranks

    start_ranks(_hsdp_rank, (4, _free_port(), str(tmp_path)), nprocs=4)
    record = torch.load(tmp_path / "hsdp.pt", weights_only=True)
    assert record["mesh"] == (2, 2) and record["placements"] == ["R", "S(0)"]
    assert record["local_fraction"] == 0.5 and record["replicas_equal"] and record["shards_differ"]
    for name, value in record["reference"].items():
        torch.testing.assert_close(record["params"][name], value, atol=1e-5, rtol=1e-4, msg=name)


def _hsdp_rank(rank: int, *args: object) -> None:
    from sharded_probes import hsdp

    hsdp(rank, *args)


def test_hsdp_refuses_a_3d_mesh_and_a_replicate_size_that_does_not_divide_the_ranks():
    from omegaconf import OmegaConf

    from litforge.config.check import check_group
    from litforge.core.errors import ConfigError
    from litforge.parallel.plans import hsdp_mesh
    from litforge.parallel.strategies import ModelParallel

    hsdp_tp = {"_target_": "litforge.parallel.strategies.ModelParallel", "tensor_parallel_size": 2, "replicate_size": 2}
    with pytest.raises(ConfigError, match=r"replicate_size=2 \(HSDP\) with strategy.tensor_parallel_size=2"):
        check_group("strategy", OmegaConf.create(hsdp_tp))

    class ThreeRanks:
        device_type = "cpu"

        def size(self) -> int:
            return 3

    with pytest.raises(ConfigError, match="replicate_size=2 does not divide the 3 data-parallel ranks"):
        hsdp_mesh(ThreeRanks(), 2)
    assert ModelParallel(data_parallel_size="auto", tensor_parallel_size=1, replicate_size=2).fsdp_kwargs() == {
        "reshard_after_forward": True,
        "replicate_size": 2,
    }


@pytest.mark.distributed
@pytest.mark.parametrize("world,modes", [(2, {"fsdp": (2, 1), "tp": (1, 2)}), (4, {"fsdp_tp": (2, 2)})])
def test_clipping_under_sharding_uses_the_global_norm(world: int, modes: dict, tmp_path: Path):
    """Clipping to 0.1 under fsdp, tp (DTensor and plain gradients mixed: torch's clip_grad_norm_ raises) and fsdp_tp
    (two meshes: it raises too) gives the gradients torch clips to on one process and the whole batch."""
    from gloo import start_ranks

    start_ranks(_clipping_rank, (world, _free_port(), str(tmp_path), modes), nprocs=world)
    record = torch.load(tmp_path / "clipping.pt", weights_only=True)
    for mode in modes:
        got = record[mode]
        torch.testing.assert_close(got["norm"], record["reference_norm"], atol=1e-6, rtol=1e-5, msg=mode)
        for name, grad in record["reference"].items():
            torch.testing.assert_close(got["grads"][name], grad, atol=1e-7, rtol=1e-5, msg=f"{mode}: {name}")
    if "tp" in modes:
        assert record["tp"]["kinds"] == ["DTensor", "Tensor"]  # the mix torch's clip_grad_norm_ refuses
    assert float(record["reference_norm"]) > 0.1 * 5  # clipping really scaled the gradients down


def _clipping_rank(rank: int, *args: object) -> None:
    from sharded_probes import clipping

    clipping(rank, *args)
