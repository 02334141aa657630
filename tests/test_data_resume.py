"""Exact mid-epoch resume of the streamed training loaders: a loader restored from `state_dict()` after k batches
yields exactly the batches the uninterrupted loader yields after them (what Lightning saves in a checkpoint and hands
back on resume). The in-memory loader's end-to-end kill -9 tests are in tests/test_reliability.py."""

from __future__ import annotations

from pathlib import Path

import torch

from conftest import make_image_folder


def assert_resumes_exactly(make_loader, k: int) -> None:
    whole = list(make_loader())
    interrupted = make_loader()
    iterator = iter(interrupted)
    for _ in range(k):
        next(iterator)
    state = interrupted.state_dict()
    del iterator
    resumed = make_loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(whole) - k > 0
    for expected, got in zip(whole[k:], rest, strict=True):
        for a, b in zip(expected, got, strict=True):
            assert torch.equal(a, b)


def test_streamed_image_folder_with_a_worker_resumes_mid_epoch_exactly(tmp_path: Path) -> None:
    from litforge.data.image_folder import ImageFolderDataModule

    root = make_image_folder(tmp_path / "images", per_class=8)
    dm = ImageFolderDataModule(
        root=str(root),
        batch_size=3,
        num_workers=1,
        max_in_memory_mb=0,
        val_fraction=0.1,
        test_fraction=0.1,
        mean=[0.5],
        std=[0.25],
    )
    dm.setup()
    assert dm.in_memory is False
    assert_resumes_exactly(dm.train_dataloader, k=2)


def test_text_loader_resumes_mid_epoch_exactly() -> None:
    from litforge.data.text import TextDataModule

    torch.manual_seed(7)  # the run's seed: the order follows it, not the global RNG's later state
    dm = TextDataModule(max_chars=3000, block_size=16, batch_size=8)
    assert_resumes_exactly(dm.train_dataloader, k=5)


def test_a_data_parallel_rank_resumes_mid_epoch_exactly_after_the_first_epoch() -> None:
    """Under ddp/fsdp/tp the loader takes a StatefulDistributedSampler (this rank's half, order from (seed, epoch)):
    a loader rebuilt in epoch 1 and restored after 2 batches yields what the uninterrupted one yields. With torchdata's
    random sampler, which Lightning wraps, epoch 1's order came from generator state no checkpoint held."""
    from types import SimpleNamespace

    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    from litforge.data.stateful import stateful_train_loader

    dataset = torch.arange(64).unsqueeze(1)
    rank = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 1})

    def epoch_one():
        loader = stateful_train_loader(dataset, batch_size=4, seed=3, trainer=rank)
        loader.sampler.set_epoch(1)  # what Lightning does at each epoch start
        return loader

    loader = epoch_one()
    assert isinstance(loader.sampler, StatefulDistributedSampler) and len(loader) == 8  # half of 64, batches of 4
    other = stateful_train_loader(dataset, batch_size=4, seed=3, trainer=rank)
    assert not torch.equal(torch.cat(list(loader)), torch.cat(list(other))), "epochs 0 and 1 differ"
    assert_resumes_exactly(epoch_one, k=2)


def test_making_a_loaders_iterator_draws_nothing_from_the_global_rng(tmp_path: Path) -> None:
    """A DataLoader draws its workers' base seed when its iterator is made, from the global RNG unless it has its own
    generator. A resumed run makes iterators at other moments than an uninterrupted one (persistent workers: once,
    after the checkpoint's RNG state is restored), so such a draw shifted every later dropout mask (the end-to-end
    case: tests/test_reliability.py::test_streamed_image_folder_with_workers_killed_in_its_first_epoch_resumes_exactly).
    """
    from types import SimpleNamespace

    from litforge.data.image_folder import ImageFolderDataModule
    from litforge.data.stateful import stateful_train_loader

    root = make_image_folder(tmp_path / "images", per_class=4)
    dm = ImageFolderDataModule(root=str(root), batch_size=2, num_workers=1, max_in_memory_mb=0, mean=[0.5], std=[0.25])
    dm.setup()
    rank = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 0})
    loaders = {
        "evaluation (workers)": dm.val_dataloader(),
        "training (workers)": dm.train_dataloader(),
        "training, a data-parallel rank": stateful_train_loader(torch.arange(8), batch_size=2, seed=1, trainer=rank),
    }
    for name, loader in loaders.items():
        before = torch.get_rng_state()
        iterator = iter(loader)
        assert torch.equal(torch.get_rng_state(), before), f"the {name} loader drew from the global RNG"
        del iterator
