"""GPU defaults that a CPU machine cannot exercise directly: the composed values of `trainer=gpu`, the TF32 switch
(`matmul_precision`, applied on CUDA runs only and recorded in provenance.json) and pinned host memory for loaders
that feed a GPU. CUDA is faked where the decision depends on it; what only a GPU can show is in
benchmarks/gpu_smoke.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate

from litforge.config.check import check_config
from litforge.core.errors import ConfigError
from litforge.data.pinned import pin_memory_for
from litforge.records import provenance
from litforge.runtime.devices import apply_matmul_precision


def test_trainer_gpu_holds_the_gpu_defaults(compose_cfg):
    cfg = compose_cfg("trainer=gpu")
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.benchmark is True  # cudnn autotuning for fixed input sizes
    assert cfg.trainer.log_every_n_steps == 50  # each logging step is a host sync
    assert compose_cfg().trainer.log_every_n_steps == 10  # the CPU default is unchanged
    assert cfg.matmul_precision == "high"


@pytest.fixture
def restore_matmul_precision():
    before, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(before)
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def test_matmul_precision_applies_to_cuda_runs_only(monkeypatch, restore_matmul_precision):
    torch.set_float32_matmul_precision("highest")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert apply_matmul_precision("high") is None
    assert torch.get_float32_matmul_precision() == "highest"  # CPU runs stay exact fp32

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert apply_matmul_precision("high", "cpu") is None  # trainer=cpu on a GPU machine
    assert torch.get_float32_matmul_precision() == "highest"
    assert apply_matmul_precision("high", "auto") == "high"
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    assert apply_matmul_precision("highest", "gpu") == "highest"
    assert not torch.backends.cudnn.allow_tf32


def test_a_bad_matmul_precision_is_refused_in_one_line(compose_cfg):
    with pytest.raises(ConfigError, match="matmul_precision") as error:
        check_config(compose_cfg("matmul_precision=fast"))
    assert "\n" not in str(error.value) and "highest" in str(error.value)


def test_provenance_records_the_process_wide_settings(tmp_path):
    record = provenance.write_start(tmp_path, settings={"matmul_precision": "high"})
    assert record["settings"] == {"matmul_precision": "high"}
    assert json.loads((tmp_path / provenance.FILE).read_text())["settings"] == {"matmul_precision": "high"}


def _trainer_on(device: str) -> SimpleNamespace:
    """What a loader reads of a one-process Trainer: its device, and no sampler shards (a Trainer always has both)."""
    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)), distributed_sampler_kwargs=None)


def test_pinned_memory_only_for_loaders_that_feed_cuda():
    assert pin_memory_for(None) is False
    assert pin_memory_for(_trainer_on("cpu")) is False
    assert pin_memory_for(_trainer_on("cuda")) is True
    assert pin_memory_for(SimpleNamespace(strategy=SimpleNamespace())) is False  # not set up yet


@pytest.mark.parametrize("device, pinned", [("cpu", False), ("cuda", True)])
def test_host_loaders_pin_memory_when_the_trainer_is_on_cuda(compose_cfg, tmp_path, device, pinned):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"document {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200)))
    cfg = compose_cfg("experiment=gpt_char", "data=text_file", f"data.path={text}")
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    datamodule.trainer = _trainer_on(device)
    assert datamodule.train_dataloader().pin_memory is pinned
    assert datamodule.val_dataloader().pin_memory is pinned


def fake_cuda_memory(monkeypatch, free_bytes: int) -> list[torch.device]:
    """`torch.cuda.mem_get_info` answering `free_bytes` free; returns the devices it was asked about."""
    asked: list[torch.device] = []

    def mem_get_info(device=None):
        asked.append(device)
        return free_bytes, 4 * free_bytes

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    return asked


def test_on_device_auto_holds_a_dataset_on_cuda_only_when_it_fits_comfortably(monkeypatch):
    from litforge.data.placement import hold_on_device

    cuda = torch.device("cuda", 0)
    asked = fake_cuda_memory(monkeypatch, free_bytes=1000)
    assert hold_on_device("auto", 249, cuda) and asked == [cuda]  # under 25% of the free memory
    assert not hold_on_device("auto", 250, cuda)
    assert hold_on_device(True, 10**12, cuda) and hold_on_device("true", 10**12, cuda)  # forced
    assert not hold_on_device(False, 1, cuda) and not hold_on_device("false", 1, cuda)
    assert not any(hold_on_device(s, 1, torch.device("cpu")) for s in ("auto", True, False))  # CPU: the host
    assert len(asked) == 2, "only auto on CUDA measures the device"
    with pytest.raises(ConfigError, match="data.on_device='maybe'"):
        hold_on_device("maybe", 1, cuda)


def test_on_device_auto_is_the_default_and_decides_once_for_all_splits(compose_cfg, monkeypatch):
    """digits with the default data.on_device=auto behind a faked CUDA trainer: held when the splits take < 25% of
    the free memory (all of them move), kept on the host when not; a CPU trainer keeps them on the host."""
    cfg = compose_cfg()
    assert cfg.data.on_device == "auto"
    moved: list[str] = []
    real_to = torch.Tensor.to

    def fake_to(self, *args, **kwargs):
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            moved.append(str(args[0]))
            return real_to(self, "cpu")  # no driver here: only the move being asked for is checked
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", fake_to)

    def loaders_on(device: str, free_bytes: int) -> list[str]:
        moved.clear()
        fake_cuda_memory(monkeypatch, free_bytes)
        dm = instantiate(cfg.data, _convert_="all")
        dm.setup()
        nbytes = sum(t.numel() * t.element_size() for split in dm._splits.values() for t in split)
        dm.trainer = SimpleNamespace(
            strategy=SimpleNamespace(root_device=torch.device(device)),
            global_rank=0,
            world_size=1,
            distributed_sampler_kwargs=None,
        )
        for loader in (dm.train_dataloader, dm.val_dataloader, dm.test_dataloader):
            loader()
        return moved[:], nbytes

    held, nbytes = loaders_on("cuda:0", free_bytes=10**10)
    assert held == ["cuda:0"] * 6  # images and labels of train, val and test
    kept, _ = loaders_on("cuda:0", free_bytes=4 * nbytes)  # exactly 25%: not comfortably
    assert kept == []
    assert loaders_on("cpu", free_bytes=10**10)[0] == []


def test_a_bad_on_device_is_refused_in_one_line(compose_cfg):
    from litforge.config.check import check_config

    with pytest.raises(ConfigError, match="data.on_device='maybe'") as error:
        check_config(compose_cfg("data.on_device=maybe"))
    assert "\n" not in str(error.value) and "expected auto, true or false" in str(error.value)
    check_config(compose_cfg("data.on_device=true"))  # and the three valid values pass
    check_config(compose_cfg("data.on_device=false"))
