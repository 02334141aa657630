"""data=streaming (LitData): prepare writes shards + shape facts from a datamodule; training streams them, resumes
mid-epoch exactly after kill -9, and under DDP each rank reads its own part of every epoch."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from conftest import CONF, TINY, make_image_folder, read_metrics, run_cli, single_run
from test_reliability import FAULTS_ENV, assert_same_weights, fault, last_ckpt


def prepare_cfg(output: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="prepare", overrides=[f"output={output}", f"paths.output_dir={output.parent}", *overrides]
        )


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """The digits written by the prepare job, composed from conf/prepare.yaml as the CLI composes it."""
    from litforge.jobs.prepare import prepare

    output = tmp_path_factory.mktemp("shards") / "digits"
    result = prepare(prepare_cfg(output))
    assert result["written"] == str(output)
    return output


def test_prepare_writes_every_split_and_the_shape_facts(shards: Path):
    from litforge.data.digits import DigitsDataModule
    from litforge.data.streaming import StreamingImageDataModule

    source = DigitsDataModule()
    source.setup()
    facts = json.loads((shards / "litforge_facts.json").read_text())
    assert facts["splits"] == {split: len(source.split_arrays(split)[1]) for split in ("train", "val", "test")}
    assert {"mean": facts["mean"], "std": facts["std"]} == source.state_dict()
    assert all((shards / split / "index.json").is_file() for split in ("train", "val", "test"))

    streamed = StreamingImageDataModule(input_dir=str(shards))  # the facts alone: no other input
    assert streamed.describe() == source.describe()
    assert streamed.state_dict() == source.state_dict()  # the normalisation the checkpoint carries
    for split in ("val", "test"):  # the very samples, in stored order
        for got, expected in zip(streamed.split_arrays(split), source.split_arrays(split), strict=True):
            assert torch.equal(got, expected)


@pytest.mark.slow
def test_prepare_refuses_a_non_empty_output_in_one_line_and_overwrites_when_asked(tmp_path: Path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    result = run_cli("prepare.py", f"output={output}", log_dir=tmp_path / "logs")
    assert result.returncode == 1 and "Traceback" not in result.output
    assert f"litforge: error: output={output} is not empty: pass overwrite=true" in result.output

    from litforge.data.digits import DigitsDataModule
    from litforge.data.streaming import write_shards

    source = DigitsDataModule(classes=[0, 1], train_per_class=4)
    facts = write_shards(source, str(output), overwrite=True)
    assert not (output / "keep.txt").exists()
    assert json.loads((output / "litforge_facts.json").read_text()) == facts
    assert facts["splits"]["train"] == len(source.split_arrays("train")[1]) > 0 and facts["num_classes"] == 2


def test_prepare_reads_an_image_folder_file_by_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from litforge.data.image_folder import ImageFolderDataModule
    from litforge.data.streaming import StreamingImageDataModule, write_shards

    source = ImageFolderDataModule(
        root=str(make_image_folder(tmp_path / "images", per_class=4)),
        mean=[0.5],
        std=[0.25],
        val_fraction=0.2,
        test_fraction=0.2,
    )
    expected = {split: source.split_arrays(split) for split in ("train", "val", "test")}
    monkeypatch.setattr(ImageFolderDataModule, "split_arrays", None)  # never the whole split decoded at once
    write_shards(source, str(tmp_path / "shards"))
    streamed = StreamingImageDataModule(input_dir=str(tmp_path / "shards"))
    assert streamed.describe() == source.describe()
    for split, arrays in expected.items():
        for got, want in zip(streamed.split_arrays(split), arrays, strict=True):
            assert torch.equal(got, want)


def test_a_missing_input_dir_names_the_key_and_says_run_prepare_first(tmp_path: Path):
    from litforge.core.errors import ConfigError
    from litforge.data.streaming import StreamingImageDataModule

    with pytest.raises(ConfigError, match=r"data.input_dir=.* holds no litforge_facts.json.*python prepare.py"):
        StreamingImageDataModule(input_dir=str(tmp_path))


def test_train_streams_the_shards_end_to_end_in_process(shards: Path, compose_cfg):
    from litforge.jobs.train import train

    cfg = compose_cfg("data=streaming", f"data.input_dir={shards}", "data.batch_size=32", *TINY, "logger=[]")
    result = train(cfg)
    metrics = result["metrics"]
    assert 0 <= metrics["test/acc"] <= 1 and metrics["val/loss"] == metrics["val/loss"]
    saved = torch.load(result["last_checkpoint"], weights_only=True)
    facts = json.loads((shards / "litforge_facts.json").read_text())
    assert saved["StreamingImageDataModule"] == {"mean": facts["mean"], "std": facts["std"]}
    # the loader's position is in the checkpoint (LitData's StreamingDataLoader.state_dict)
    loader_state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert loader_state["dataset"]["input_dir_path"] == str(shards / "train")


def _batches(loader) -> list[dict]:
    return [{k: v.clone() for k, v in batch.items()} for batch in loader]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_the_streaming_loader_resumes_mid_epoch_exactly(shards: Path, num_workers: int):
    """A loader restored from `state_dict()` after k batches yields exactly what the uninterrupted one yields next."""
    from litforge.data.streaming import StreamingImageDataModule

    def make():
        return StreamingImageDataModule(
            input_dir=str(shards), batch_size=100, num_workers=num_workers, shuffle_seed=3
        ).train_dataloader()

    whole = _batches(make())
    interrupted = make()
    iterator = iter(interrupted)
    seen = [next(iterator)["index"].clone() for _ in range(4)]
    state = interrupted.state_dict()
    del iterator
    resumed = make()
    resumed.load_state_dict(state)
    rest = _batches(resumed)
    assert len(rest) == len(whole) - 4 > 0
    assert all(torch.equal(a, b["index"]) for a, b in zip(seen, whole, strict=False))
    for expected, got in zip(whole[4:], rest, strict=True):
        assert all(torch.equal(expected[k], got[k]) for k in ("index", "image", "label"))


COMMON = [
    *TINY,
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=6",
    "callbacks.early_stopping=null",
    "data=streaming",
    "data.batch_size=16",
]


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_auto_ends_like_an_uninterrupted_run(shards: Path, tmp_path: Path):
    """checkpoint_every=4: last.ckpt at step 8 (epoch 1, batch 2 of 6); SIGKILL at step 10; resume=auto is exact."""
    common = [*COMMON, f"data.input_dir={shards}"]
    whole = run_cli("train.py", *common, log_dir=tmp_path / "whole")
    assert whole.returncode == 0, whole.output[-3000:]
    killed = run_cli(
        "train.py",
        *common,
        "checkpoint_every=4",
        *fault("SignalAt", step=10, signal="SIGKILL"),
        log_dir=tmp_path / "killed",
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path / "killed")
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (1, 8), "saved mid-epoch by the clock"
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["num_samples_yielded"] == 2 * 16

    resumed = run_cli(
        "train.py", "resume=auto", "+callbacks.fault.step=-1", log_dir=tmp_path / "killed", env=FAULTS_ENV
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    uninterrupted = single_run(tmp_path / "whole")
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("test/acc", "test/loss", "val/acc", "val/loss"):
        assert got[name] == pytest.approx(expected[name], abs=1e-6), name


def _epoch_indices(rank: int, world_size: int, port: int, input_dir: str, out) -> None:
    """One gloo rank: two epochs of its training sample ids (LitData splits by torch.distributed's rank)."""
    from datetime import timedelta

    import torch.distributed as dist

    from litforge.data.streaming import StreamingImageDataModule

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=timedelta(seconds=60)
    )
    try:
        dm = StreamingImageDataModule(input_dir=input_dir, batch_size=16, shuffle_seed=0)
        loader = dm.train_dataloader()
        epochs = [[int(i) for batch in loader for i in batch["index"]] for _ in range(2)]
        val = [int(i) for batch in dm.val_dataloader() for i in batch["index"]]
        out.put((rank, (epochs, val)))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_ranks_read_disjoint_parts_covering_the_split(shards: Path):
    """Two gloo ranks forked from this process (torch and LitData already imported: no start-up of their own)."""
    import multiprocessing as mp

    from gloo import _free_port

    ctx, port = mp.get_context("fork"), _free_port()
    out = ctx.Queue()
    procs = [ctx.Process(target=_epoch_indices, args=(rank, 2, port, str(shards), out)) for rank in range(2)]
    for proc in procs:
        proc.start()
    try:
        per_rank = dict(out.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert all(proc.exitcode == 0 for proc in procs)
    per_rank, val = {r: v[0] for r, v in per_rank.items()}, {r: v[1] for r, v in per_rank.items()}
    splits = json.loads((shards / "litforge_facts.json").read_text())["splits"]
    n_train = splits["train"]
    # evaluation keeps every sample, and no rank is left without validation batches (Lightning refuses that)
    assert val[0] and val[1] and not set(val[0]) & set(val[1]) and sorted(val[0] + val[1]) == list(range(splits["val"]))
    for epoch in range(2):
        a, b = (set(per_rank[r][epoch]) for r in range(2))
        assert len(a) == len(per_rank[0][epoch]) and len(b) == len(per_rank[1][epoch]), "a sample twice on one rank"
        assert not a & b, "a sample on both ranks"
        assert len(per_rank[0][epoch]) == len(per_rank[1][epoch]), "ranks must take the same number of batches"
        assert a | b <= set(range(n_train)) and len(a | b) > n_train - 2 * 16  # all but an uneven remainder
    assert per_rank[0][0] != per_rank[0][1], "a new order each epoch"
