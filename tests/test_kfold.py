"""K-fold cross-validation (`data.num_folds`, `data.fold`): disjoint stratified folds of the train+val pool, the test
split untouched, the bad values refused in one line, and `litforge.records.aggregate` giving mean ± std over the
folds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from tests.conftest import make_image_folder

from litforge.core.errors import ConfigError
from litforge.data.base import fold_indices
from litforge.data.digits import DigitsDataModule


def _rows(images: torch.Tensor) -> list[bytes]:
    """Each image as bytes, sorted: a multiset that equals another one when the same images are there."""
    return sorted(img.numpy().tobytes() for img in images)


def test_fold_indices_are_disjoint_cover_the_pool_stratified_and_seeded():
    labels = torch.tensor([0] * 23 + [1] * 11 + [2] * 7 + [3] * 5)  # imbalanced
    k = 5
    folds = [fold_indices(labels, k, i, seed=3) for i in range(k)]
    vals = [v for _, v in folds]
    assert sorted(torch.cat(vals).tolist()) == list(range(len(labels))), "the val folds cover the pool exactly once"
    for train, val in folds:
        assert not set(train.tolist()) & set(val.tolist())
        assert len(train) + len(val) == len(labels)
        for c in range(4):  # each fold holds 1/K of every class, within one sample
            share = int((labels == c).sum()) / k
            assert abs(int((labels[val] == c).sum()) - share) < 1
    assert all(
        torch.equal(a, b)
        for (_, a), (_, b) in zip(folds, [fold_indices(labels, k, i, 3) for i in range(k)], strict=True)
    )
    assert not torch.equal(fold_indices(labels, k, 0, seed=4)[1], folds[0][1]), "another split_seed, other folds"


def test_digits_folds_split_the_pool_and_leave_the_test_split_alone():
    plain = DigitsDataModule(split_seed=1)
    plain.setup()
    pool_images, pool_labels = plain.load_arrays("train")
    test_images = plain.split_arrays("test")[0]
    k, vals, val_labels = 4, [], []
    for fold in range(k):
        dm = DigitsDataModule(split_seed=1, num_folds=k, fold=fold)
        dm.setup()
        train, val = dm.split_arrays("train"), dm.split_arrays("val")
        assert torch.equal(dm.split_arrays("test")[0], test_images), "the test split does not depend on the folds"
        assert _rows(torch.cat([train[0], val[0]])) == _rows(pool_images), "train + val = the pool"
        assert abs(len(val[0]) - len(pool_labels) / k) < 1
        vals.append(val[0])
        val_labels.append(val[1])
    assert _rows(torch.cat(vals)) == _rows(pool_images), "the K validation folds are the pool, each image once"
    assert torch.equal(torch.bincount(torch.cat(val_labels)), torch.bincount(pool_labels))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_folds": 1}, "data.num_folds=1 must be an integer >= 2"),
        ({"num_folds": 5, "fold": 5}, "data.fold=5 is outside [0, 5)"),
        ({"num_folds": 3, "fold": -1}, "data.fold=-1 is outside [0, 3)"),
        ({"fold": 2}, "data.fold=2 takes effect only with data.num_folds"),  # was ignored: the usual split
    ],
)
def test_bad_fold_keys_are_refused_at_construction(kwargs, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        DigitsDataModule(**kwargs)


def test_more_folds_than_the_smallest_class_is_refused_in_one_line():
    dm = DigitsDataModule(train_per_class=3, num_folds=4)
    with pytest.raises(ConfigError, match=r"data.num_folds=4 is larger than the smallest class count") as err:
        dm.setup()
    assert "\n" not in str(err.value) and "data.num_folds=3 or less" in str(err.value)


def test_config_refuses_a_fold_outside_the_folds(compose_cfg):
    from litforge.config.check import check_config

    with pytest.raises(ConfigError, match=r"data.fold=3 is outside \[0, 3\)"):
        check_config(compose_cfg("data.num_folds=3", "data.fold=3"))
    check_config(compose_cfg("data.num_folds=3", "data.fold=2"))


def test_image_folder_folds_pool_the_training_files_and_keep_test(tmp_path: Path):
    from litforge.data.image_folder import ImageFolderDataModule

    root = make_image_folder(tmp_path / "imgs", per_class=10)
    plain = ImageFolderDataModule(root=str(root), split_seed=2)
    pool = sorted(plain.split_samples("train") + plain.split_samples("val"))
    vals = []
    for fold in range(3):
        dm = ImageFolderDataModule(root=str(root), split_seed=2, num_folds=3, fold=fold)
        train, val = dm.split_samples("train"), dm.split_samples("val")
        assert dm.split_samples("test") == plain.split_samples("test")
        assert sorted(train + val) == pool and not set(train) & set(val)
        vals += val
    assert sorted(vals) == pool


def test_aggregate_gives_mean_and_std_over_the_folds(tmp_path: Path, capsys):
    from litforge.records.aggregate import main

    sweep = tmp_path / "multirun"
    accs = [0.8, 0.9, 0.85]
    for fold, acc in enumerate(accs):
        run = sweep / str(fold)
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["data.num_folds=3", f"data.fold={fold}"]))
        (run / "metrics.json").write_text(
            json.dumps({"metrics": {"val/acc": acc}, "objective": {"metric": "val/acc", "mode": "max"}})
        )
    assert main([str(sweep)]) == 0
    md = (sweep / "aggregate.md").read_text()
    mean, std = torch.tensor(accs).mean().item(), torch.tensor(accs).std().item()
    assert f"| data.num_folds=3 | 3 | 0 | fold=0 fold=1 fold=2 | {mean:.4f} ± {std:.4f} |" in md
