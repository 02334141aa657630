"""GPT decoder, packed documents (the dynamic graph), text data, the language-model task and generate.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from conftest import run_cli, single_run
from litforge.core.errors import DataError
from litforge.models.gpt import GPT, document_layout


def test_packed_documents_match_separate_runs():
    """A row packing two documents gives each document exactly the logits it gets alone (no cross-talk, positions
    restart), while the same row without doc ids does attend across the boundary."""
    torch.manual_seed(0)
    net = GPT(vocab_size=11, block_size=16, dim=32, depth=2, heads=4).eval()
    a, b = torch.randint(11, (1, 6)), torch.randint(11, (1, 10))
    packed = torch.cat([a, b], dim=1)
    doc_ids = torch.tensor([[0] * 6 + [1] * 10])
    out = net(packed, doc_ids)
    torch.testing.assert_close(out[:, :6], net(a), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[:, 6:], net(b), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(net(packed)[:, 6:], net(b), atol=1e-3)


def test_flex_attention_block_mask_matches_the_explicit_mask_and_reads_nothing(monkeypatch):
    """model.attention=flex (FlexAttention's document BlockMask, what `auto` takes on CUDA) gives the explicit
    mask's logits to 1e-5 on packed rows, one crossing a boundary and one not, without a host read. (FlexAttention
    has no CPU backward: training through it is refused here, and benchmarks/gpu.py compares gradients on CUDA.)"""
    from litforge.core.errors import ConfigError
    from test_speed import CountSyncs, _patch_sync_methods

    torch.manual_seed(0)
    mask_net = GPT(vocab_size=13, block_size=32, dim=32, depth=2, heads=4, attention="mask")
    flex_net = GPT(vocab_size=13, block_size=32, dim=32, depth=2, heads=4, attention="flex")
    flex_net.load_state_dict(mask_net.state_dict())
    idx = torch.randint(13, (3, 32))
    doc_ids = torch.tensor([[0] * 5 + [1] * 20 + [2] * 7, [4] * 32, [5] * 31 + [6]])
    counter = CountSyncs()
    counter.counting = True
    _patch_sync_methods(monkeypatch, counter)
    with torch.no_grad():
        out = flex_net(idx, doc_ids)
    assert counter.calls == []
    monkeypatch.undo()
    with torch.no_grad():
        ref = mask_net(idx, doc_ids)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="model.attention=flex cannot train on a CPU"):
        flex_net(idx, doc_ids)
    from litforge.models.gpt import attention_inputs

    _, auto_mask = attention_inputs(idx, doc_ids, "auto", 0.0, True)
    assert isinstance(auto_mask, torch.Tensor)  # auto on CPU: the explicit mask


def test_gpt_attention_key_is_checked():
    from litforge.core.errors import ConfigError

    with pytest.raises(ConfigError, match="model.attention='fast'"):
        GPT(vocab_size=5, block_size=8, dim=16, depth=1, heads=2, attention="fast")
    with pytest.raises(ConfigError, match="model.attention=flex with model.dropout=0.1"):
        GPT(vocab_size=5, block_size=8, dim=16, depth=1, heads=2, attention="flex", dropout=0.1)


def test_document_layout_masks_within_documents_without_asking_the_data():
    positions, mask = document_layout(torch.tensor([[3, 3, 3, 4, 4], [7, 7, 7, 7, 7]]))
    assert positions.tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]]
    assert mask is not None and not mask[0, 0, 3, 2] and mask[0, 0, 4, 3] and not mask[0, 0, 3, 4]
    # a row of one document gets the plain causal mask (no `.any()` branch: a host sync per forward on a GPU);
    # unpacked data (data.packed=false) passes no doc_ids at all and takes the fused is_causal kernel
    assert torch.equal(mask[1, 0], torch.ones(5, 5, dtype=torch.bool).tril())


def test_gpt_is_causal():
    torch.manual_seed(0)
    net = GPT(vocab_size=7, block_size=8, dim=16, depth=1, heads=2).eval()
    x = torch.randint(7, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 7
    torch.testing.assert_close(net(x)[:, :5], net(y)[:, :5])


def test_text_file_errors_and_byte_tokens(tmp_path: Path):
    from litforge.data.text import TextDataModule

    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="empty"):
        TextDataModule(path=str(tmp_path / "empty.txt"))
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 100)
    with pytest.raises(DataError, match="not UTF-8"):
        TextDataModule(path=str(tmp_path / "latin1.txt"))
    (tmp_path / "short.txt").write_text("abc")
    with pytest.raises(DataError, match="block_size"):
        TextDataModule(path=str(tmp_path / "short.txt"))
    (tmp_path / "ok.txt").write_text("héllo wörld\n\n" * 50)
    dm = TextDataModule(path=str(tmp_path / "ok.txt"), tokenizer="byte", block_size=16, document_separator="\n\n")
    assert dm.describe()["vocab_size"] == 256 and dm.describe()["vocab"] is None
    x, y, docs = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == docs.shape and (x[:, 1:] == y[:, :-1]).all()
    assert docs.max() > docs.min()  # several documents per row: packed
    assert 0 < dm.unigram_loss < math.log(256)


def test_language_model_on_image_data_names_the_data_kind(compose_cfg):
    """A task × data mismatch is caught from the task class, before a net is built from shapes that cannot fit."""
    from litforge.core.errors import ConfigError
    from litforge.jobs.train import train

    with pytest.raises(ConfigError, match="trains on text data, but data `DigitsDataModule` is image data"):
        train(compose_cfg("task=language_model", "model=gpt", "print_config=false"))


@pytest.mark.slow
def test_gpt_char_learns_and_generates(tmp_path: Path):
    """A short gpt_char run ends well below the unigram baseline; generate.py continues a prompt from its checkpoint."""
    result = run_cli(
        "train.py",
        "experiment=gpt_char",
        "data.max_chars=40000",
        "data.block_size=32",
        "model.dim=64",
        "model.depth=2",
        "trainer.max_epochs=8",
        "trainer.val_check_interval=1.0",
        "callbacks.progress_bar=null",
        "print_config=false",
        "callbacks.text_samples.max_new_tokens=20",
        log_dir=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.output[-3000:]
    run = single_run(tmp_path, "gpt_char")
    import json

    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["val/loss"] < 0.8 * metrics["val/unigram_loss"], metrics
    assert metrics["test/ppl"] == pytest.approx(math.exp(metrics["test/loss"]), rel=0.05)
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    # eval.py rebuilds the language model and its text data from the checkpoint alone, and reproduces the test loss
    best = json.loads((run / "metrics.json").read_text())["best_checkpoint"]
    evaluated = run_cli("eval.py", f"ckpt_path={best}", log_dir=tmp_path)
    assert evaluated.returncode == 0, evaluated.output[-2000:]
    eval_metrics = json.loads((single_run(tmp_path, "eval") / "metrics.json").read_text())["metrics"]
    assert eval_metrics["test/loss"] == pytest.approx(metrics["test/loss"], abs=1e-5)
    assert eval_metrics["test/ppl"] == pytest.approx(metrics["test/ppl"], rel=1e-4)
    gen = run_cli(
        "generate.py",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        "prompt=The ",
        "max_new_tokens=30",
        log_dir=tmp_path,
    )
    assert gen.returncode == 0, gen.output[-2000:]
    sample = (single_run(tmp_path, "generate") / "samples.txt").read_text()
    assert sample.startswith("The ") and len(sample) >= 30  # 30 tokens: characters (a "\r\n" could merge)
