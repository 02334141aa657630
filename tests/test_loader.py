"""InMemoryLoader: each epoch is a seeded permutation, shards match a single process, resume is exact."""

from __future__ import annotations

import torch

from litforge.data.memory import InMemoryLoader


def _loader(n: int = 50, batch: int = 8, **kwargs) -> InMemoryLoader:
    x = torch.arange(n).float().unsqueeze(1)
    y = torch.arange(n)
    return InMemoryLoader((x, y), batch_size=batch, **kwargs)


def _epoch(loader: InMemoryLoader, epoch: int) -> list[list[int]]:
    loader.set_epoch(epoch)
    return [b[1].tolist() for b in loader]


def test_each_epoch_sees_every_sample_once_in_a_seeded_order():
    loader = _loader(shuffle=True, seed=3)
    first, second = _epoch(loader, 0), _epoch(loader, 1)
    assert len(first) == len(loader) == 7
    assert sorted(sum(first, [])) == list(range(50))
    assert first != second, "epochs must be shuffled differently"
    assert _epoch(_loader(shuffle=True, seed=3), 1) == second, "epoch order depends only on (seed, epoch)"
    assert _epoch(_loader(shuffle=True, seed=4), 1) != second


def test_unshuffled_loader_is_in_order_and_drop_last():
    assert sum(_epoch(_loader(), 0), []) == list(range(50))
    assert len(_loader(drop_last=True)) == 6


def test_ranks_split_each_global_batch_of_a_single_process():
    single = _epoch(_loader(batch=8, shuffle=True, seed=1), 2)
    ranks = [_epoch(_loader(batch=4, shuffle=True, seed=1, rank=r, world_size=2), 2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(single)
    for step, global_batch in enumerate(single):
        assert sorted(ranks[0][step] + ranks[1][step]) == sorted(global_batch)
        assert not set(ranks[0][step]) & set(ranks[1][step])


def test_mid_epoch_state_counts_only_consumed_batches_and_resumes_exactly():
    loader = _loader(shuffle=True, seed=5)
    loader.set_epoch(4)
    it = iter(loader)
    consumed = [next(it)[1].tolist() for _ in range(3)]
    state = loader.state_dict()  # a sized loader is not pre-fetched by Lightning: every yielded batch was trained on
    assert state == {"epoch": 4, "batches_done": 3, "seed": 5}

    resumed = _loader(shuffle=True, seed=0)
    resumed.load_state_dict(state)
    rest = _epoch(resumed, 4)
    assert consumed + rest == _epoch(_loader(shuffle=True, seed=5), 4)
    assert len(_epoch(resumed, 5)) == len(loader), "the skip applies to the resumed epoch only"


def test_resume_state_from_an_earlier_epoch_is_ignored_when_the_loop_moved_on():
    loader = _loader(shuffle=True, seed=5)
    loader.load_state_dict({"epoch": 1, "batches_done": 4, "seed": 5})
    assert len(_epoch(loader, 2)) == len(loader)


def test_abandoned_iteration_does_not_shorten_the_next_one():
    loader = _loader()
    it = iter(loader)
    next(it), next(it)  # e.g. Lightning's sanity check stops after 2 batches
    assert len(_epoch(loader, 0)) == len(loader)
