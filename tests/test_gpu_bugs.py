"""Failures that first showed on GPUs (issue 18), each simulated on CPU: gloo ranks, patched devices, faked
accelerators. What CPU cannot show is in benchmarks/gpu_smoke.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from gloo import GlooRanks
from litforge.callbacks.text_samples import TextSamples
from litforge.parallel.plans import shard
from litforge.tasks.language_model import LanguageModelTask


def _tiny_language_model():
    torch.manual_seed(0)
    net = {"_target_": "litforge.models.gpt.GPT", "_partial_": True, "dim": 16, "depth": 2, "heads": 2}
    return LanguageModelTask(
        net=net,
        optimizer={"_target_": "torch.optim.AdamW", "_partial_": True},
        vocab_size=11,
        block_size=8,
        vocab=list("\nabcdefghij"),
    )


def _text_sample_on_sharded_ranks(rank: int, world_size: int, tp: int) -> str:
    """Shard a tiny GPT over the ranks (FSDP2, or tensor parallel), run the TextSamples callback as Lightning does
    at a validation end, then a collective: every rank must get through both."""
    task = _tiny_language_model()
    mesh = init_device_mesh("cpu", (world_size // tp, tp), mesh_dim_names=("data_parallel", "tensor_parallel"))
    shard(task.net, mesh)
    trainer = SimpleNamespace(
        sanity_checking=False,
        is_global_zero=rank == 0,
        global_rank=rank,
        world_size=world_size,
        current_epoch=0,
        global_step=0,
        loggers=[],
    )
    callback = TextSamples(max_new_tokens=6)
    callback.on_validation_epoch_end(trainer, task)
    dist.barrier()
    return getattr(callback, "last_sample", None)


@pytest.mark.distributed
@pytest.mark.parametrize("tp", [1, 2], ids=["fsdp", "tp"])
def test_text_samples_under_sharding_do_not_hang(ranks: GlooRanks, tp: int):
    """`experiment=gpt_char strategy=fsdp trainer.devices=2` hung at its first validation: rank 0 generated through
    sharded blocks alone, so its all-gathers never met the other ranks'. Now every rank generates (same seed, same
    text); rank 0 logs it."""
    texts = ranks.run(_text_sample_on_sharded_ranks, tp)
    assert texts[0] == texts[1] and len(texts[0]) == 6


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # dcp.save in one process, on purpose
def test_a_gpu_runs_sharded_checkpoint_consolidates_on_a_cpu_only_machine(tmp_path, monkeypatch):
    """Rank 0's meta.pt beside the shards holds tensors where the run kept them (ModelCheckpoint's best score lives
    on the GPU): loading it without map_location on a CPU-only machine failed ("Attempting to deserialize object on
    a CUDA device"). Simulated by tagging the saved storages as cuda:0."""
    import torch.distributed.checkpoint as dcp

    from litforge.checkpointing.consolidate import META, consolidate

    folder = tmp_path / "last.ckpt"
    dcp.save({"state_dict": {"net.weight": torch.ones(2, 2)}}, checkpoint_id=str(folder), no_dist=True)
    with monkeypatch.context() as patched:  # what torch.save writes for a tensor on cuda:0
        patched.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(
            {"callbacks": {"ModelCheckpoint": {"best_model_score": torch.tensor(0.25)}}, "epoch": 3}, folder / META
        )
    assert not torch.cuda.is_available()
    with pytest.raises(RuntimeError, match="CUDA"):  # the simulation holds: a plain load fails here
        torch.load(folder / META, weights_only=True)

    merged = torch.load(consolidate(folder), weights_only=True)
    assert merged["epoch"] == 3 and merged["callbacks"]["ModelCheckpoint"]["best_model_score"].device.type == "cpu"
    torch.testing.assert_close(merged["state_dict"]["net.weight"], torch.ones(2, 2))


def _resume_rng_on_ranks(rank: int, world_size: int) -> tuple[list[float], list[float]]:
    """Each rank seeds differently, checkpoints (all ranks run the hook; rank 0's dict is the one written), scrambles
    its generator, loads rank 0's dict: its next draws must be the ones it would have made."""
    task = _tiny_language_model()
    torch.manual_seed(100 + rank)
    torch.rand(5)  # some training happened
    checkpoint: dict = {}
    task.on_save_checkpoint(checkpoint)
    expected = torch.rand(3).tolist()
    written = [checkpoint]
    dist.broadcast_object_list(written, src=0)  # only rank 0 writes the file; every rank reads that file
    torch.manual_seed(0)
    task.trainer = SimpleNamespace(state=SimpleNamespace(fn="fit"))
    task.on_load_checkpoint(written[0])
    return expected, torch.rand(3).tolist()


@pytest.mark.distributed
def test_each_rank_resumes_its_own_rng_state(ranks: GlooRanks):
    """Only rank 0's RNG state was saved, and every rank restored it: rank 1 resumed with rank 0's dropout noise."""
    results = ranks.run(_resume_rng_on_ranks)
    for rank, (expected, resumed) in enumerate(results):
        assert resumed == expected, f"rank {rank} resumed another rank's random stream"
    assert results[0][0] != results[1][0]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["strategy=fsdp", "trainer.sync_batchnorm=true"], "trainer.sync_batchnorm=true is ignored under"),
        (["strategy=tp", "trainer.sync_batchnorm=true"], "trainer.sync_batchnorm=true is ignored under"),
        (["strategy=fsdp", "channels_last=true"], "channels_last=true fails under"),
    ],
)
def test_options_that_fsdp_and_tp_ignore_or_break_are_refused_in_one_line(compose_cfg, overrides, says):
    from litforge.config.check import check_config
    from litforge.core.errors import ConfigError

    check_config(compose_cfg("strategy=ddp", "trainer.sync_batchnorm=true", "channels_last=true"))  # fine under DDP
    with pytest.raises(ConfigError, match=says) as error:
        check_config(compose_cfg(*overrides))
    assert "\n" not in str(error.value)


def test_deterministic_on_cuda_warns_on_ops_without_a_deterministic_kernel(monkeypatch, caplog):
    """Strict `trainer.deterministic=true` failed on CUDA at the first backward of adaptive average pooling."""
    import logging

    from litforge.runtime.devices import deterministic_mode

    # the record must reach caplog whatever logging state earlier in-process tests left (a level or a disabled logger
    # seen once in the full suite, not alone): set this logger's level and enable it for the test only
    logger = logging.getLogger("litforge.runtime.devices")
    monkeypatch.setattr(logger, "disabled", False)
    caplog.set_level(logging.WARNING, logger="litforge.runtime.devices")
    # caplog's handler on the logger itself (also when a parent stopped propagating), removed again after the test
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, caplog.handler])
    assert deterministic_mode(True, "auto") is True and deterministic_mode(True, "cpu") is True  # this CPU: strict
    assert deterministic_mode(True, "gpu") == "warn" and deterministic_mode(True, "cuda") == "warn"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with a GPU, accelerator=auto
    assert deterministic_mode(True, "auto") == "warn" and deterministic_mode(True, "cpu") is True
    assert deterministic_mode(False, "auto") is False and deterministic_mode(None, "auto") is None
    assert "trainer.deterministic=true on CUDA" in caplog.text


def test_predict_and_generate_pick_the_gpu_when_there_is_one(monkeypatch, compose_cfg):
    """predict.py and generate.py ran on the CPU even on a GPU machine; `device: auto` now takes the GPU."""
    from omegaconf import OmegaConf

    from litforge.config.check import check_config
    from litforge.tasks.restore import inference_device

    def check_value(key: str, value: object) -> None:
        check_config(OmegaConf.create({key: value}))

    from litforge.core.errors import ConfigError

    assert inference_device("auto") == torch.device("cpu") and inference_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="device=cuda but this machine has no CUDA GPU: pass device=auto"):
        inference_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inference_device("auto") == torch.device("cuda") and inference_device("cuda:1") == torch.device("cuda:1")
    for job in ("predict", "generate"):
        assert compose_cfg("ckpt_path=x.ckpt", config_name=job).device == "auto"
    with pytest.raises(ConfigError, match="device='gpu0': expected auto, cpu, cuda or cuda:<index>"):
        check_value("device", "gpu0")


def test_the_gpu_smoke_script_says_so_and_passes_without_cuda(capsys):
    """benchmarks/gpu_smoke.py is for a GPU machine; on this CPU-only one it says so in one line and exits 0."""
    from benchmarks.gpu_smoke import _runs, main

    assert main() == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "gpu_smoke: no CUDA GPU on this machine (torch.cuda.is_available() is False): nothing to run"
    ]
    runs = _runs(Path("/tmp"))
    assert len(runs) >= 12 and {script for _, script, *_ in runs} >= {"train.py", "eval.py", "export.py", "generate.py"}
