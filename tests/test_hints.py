"""What a refusal suggests works (issue #39, "hints that work"): every `e.g. key=value` and `did you mean key=value?`
in the refusals of the bad-input tables is accepted by the check, `+key` is never offered for a key nothing reads,
and a group switched off with `=null` runs without it.

In-process through the functions the entry scripts call; the same mistakes through the real CLI are rows of
tests/test_bad_input.py (block `#39 hints`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import CONF, TINY, run_cli, stub_checkpoint
from litforge.core.errors import ConfigError, LitforgeError

pytestmark = pytest.mark.slow

# a suggestion the user can type: `e.g. key=value` or `did you mean key=value?`
SUGGESTION = re.compile(r"(?:e\.g\. |did you mean )(\S+?)(?:\?|[,;)]?(?:\s|$))")


def refusal(job: str, overrides: list[str]) -> str | None:
    """The line the command line's check answers `overrides` with, or None when it lets them through."""
    from litforge.cli.preflight import checked_overrides

    try:
        checked_overrides(CONF, job, overrides)
    except LitforgeError as exc:
        return str(exc)
    return None


def suggestions(message: str) -> list[str]:
    return [s for s in SUGGESTION.findall(message) if not s.startswith(("/", "."))]  # a path named as an example


def _rows(tmp: Path) -> list[tuple[str, list[str]]]:
    """(job, command line) of every row of the bad-input tables (the CLI's, the preflight's)."""
    from test_bad_input import CASES, VALUES
    from test_preflight import PREFLIGHT

    ckpt = stub_checkpoint(tmp)
    rows = []
    for i, (script, args, *_) in enumerate(CASES):
        (tmp / str(i)).mkdir()
        rows.append((script[:-3], args(tmp / str(i), ckpt)))
    return rows + [("train", overrides) for overrides, *_ in [*VALUES, *PREFLIGHT]]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["+test=False"], "+test=False: lightning-hydra-template's key, not litforge's; test_after_training=False"),
        (["test=False"], "test=False: lightning-hydra-template's key, not litforge's; test_after_training=False"),
        (["+tset=False"], "train reads no top-level key `tset`, so it would change nothing"),
        (["++shuffle=true"], "train reads no top-level key `shuffle`"),
        (["+seed=3"], "+seed=3: seed is already a key of train's config: set it without +, as seed=3"),
        (["trainer.foo=1"], "trainer has no key `foo`; remove it, or fix its spelling (trainer has: accelerator"),
    ],
)
def test_no_plus_key_is_offered_for_a_key_nothing_reads(overrides: list[str], says: str, tmp_path: Path):
    message = refusal("train", [f"paths.log_dir={tmp_path}", *overrides])
    assert message is not None and says in message and "would add it" not in message, message


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("lr=0.1", "optimizer.lr=0.1"),  # each was "remove it, or fix its spelling" and a list of top-level keys
        ("epochs=3", "trainer.max_epochs=3"),
        ("steps=100", "trainer.max_steps=100"),
        ("batch_size=64", "data.batch_size=64"),
        ("seeed=3", "seed=3"),  # a top-level key misspelt: still itself
    ],
)
def test_a_top_level_key_typed_for_a_groups_is_answered_with_that_key(typed: str, meant: str, tmp_path: Path):
    message = refusal("train", [f"paths.log_dir={tmp_path}", typed])
    assert message is not None and message.endswith(f"did you mean {meant}?"), message
    assert refusal("train", [f"paths.log_dir={tmp_path}", meant]) is None


def test_a_key_of_the_groups_other_options_names_them_and_no_look_alike_of_another_meaning(tmp_path: Path):
    """`data.num_workers=4` on the default (in-memory) data was answered `did you mean data.num_folds=4?`, which turns
    the run into a k-fold split: a key differing in a whole word is no misspelling, and the options of the group that
    have the key are named; a misspelt key still gets its key."""
    message = refusal("train", [f"paths.log_dir={tmp_path}", "data.num_workers=4"])
    assert message == (
        "data.num_workers=4: data has no key `num_workers`; it is a key of data=image_folder, data=streaming: choose "
        "one of them, or remove data.num_workers=4"
    )
    message = refusal("train", [f"paths.log_dir={tmp_path}", "data.num_fold=4"])
    assert message is not None and message.endswith("did you mean data.num_folds=4?"), message


def test_a_key_of_an_option_in_the_users_own_config_folder_is_named_too(tmp_path: Path):
    """The options named for a key the chosen option lacks include the user's own (a searchpath folder, or the
    project's conf/ of `litforge new`), not only litforge's conf/."""
    own = tmp_path / "conf" / "data"
    own.mkdir(parents=True)
    (own / "my_frames.yaml").write_text("_target_: mypkg.data.Frames\nframe_stride: 2\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    message = refusal("train", [f"paths.log_dir={tmp_path}", searchpath, "data.frame_stride=4"])
    assert message == (
        "data.frame_stride=4: data has no key `frame_stride`; it is a key of data=my_frames: choose one of them, or "
        "remove data.frame_stride=4"
    )
    from litforge.cli.preflight import checked_overrides

    with pytest.raises(LitforgeError, match="it is a key of data=my_frames"):  # the project's folder (--config-dir)
        checked_overrides(CONF, "train", [f"paths.log_dir={tmp_path}", "data.frame_stride=4"], top_dir=own.parent)


def test_a_key_an_interpolation_reads_may_be_added(tmp_path: Path):
    """A top-level key is read where an interpolation names it: `+width=64` with `model.hidden_dims=[${width}]`."""
    assert refusal("train", [f"paths.log_dir={tmp_path}", "+width=64", "model.hidden_dims=[${width}]"]) is None


def test_null_switches_a_group_off(tmp_path: Path):
    """`logger=null` / `callbacks=null` are Hydra's `~logger` / `~callbacks` (Hydra refuses a null group in a
    traceback): the run trains without loggers and without callbacks."""
    from litforge.cli.command_line import null_groups_removed

    args = ["logger=null", "callbacks=null", "model.dropout=null", "hydra=null", "-m"]
    assert null_groups_removed(CONF, args) == ["~logger", "~callbacks", "model.dropout=null", "hydra=null", "-m"]
    tiny = [o for o in TINY if not o.startswith("callbacks.")]
    result = run_cli("train.py", *tiny, "logger=null", "callbacks=null", log_dir=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.output, result.output[-3000:]
    assert not list(tmp_path.rglob("events.out.tfevents.*")), "logger=null still logged"


@pytest.mark.parametrize("batches", [1, 2, 3, 7, 21, 101, 12345])
def test_a_fraction_of_no_batch_is_named_with_the_loaders_size(batches: int, compose_cfg):
    """Lightning's message (pytorch_lightning's `_parse_num_batches`) read into one line whose example gives one
    batch and passes the check."""
    from litforge.config.check import check_config
    from litforge.jobs.build import too_few_batches

    class MisconfigurationException(Exception):  # Lightning's, by name
        pass

    lightning = f"You requested to check 1e-06 of the `val_dataloader` but 1e-06 * {batches} < 1. Please increase"
    message = str(too_few_batches(MisconfigurationException(lightning)))
    assert message.startswith("trainer.limit_val_batches=1e-06: the validation data is ") and f" {batches} " in message
    example = float(message.rsplit("e.g. trainer.limit_val_batches=", 1)[1])
    assert int(example * batches) >= 1 and example <= 1, example
    check_config(compose_cfg(f"trainer.limit_val_batches={example}"))
    assert too_few_batches(ValueError(lightning)) is None


def test_an_empty_input_file_is_named_by_input(tmp_path: Path):
    from litforge.data.tabular import TabularDataModule
    from litforge.jobs.predict import read_inputs

    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ConfigError, match=r"^input=.*empty\.csv: a CSV file needs a header row"):
        read_inputs(str(tmp_path / "empty.csv"), TabularDataModule())


@pytest.mark.parametrize(
    "key", ["paths.log_dir", "paths.data_dir", "hydra.run.dir", "callbacks.model_checkpoint.dirpath"]
)
def test_every_path_under_a_file_is_refused_before_the_work(key: str, tmp_path: Path):
    (tmp_path / "a_file").write_text("x")
    under = tmp_path / "a_file" / "out"
    message = refusal("train", [f"paths.log_dir={tmp_path / 'logs'}", f"{key}={under}"])
    assert message == f"{key}={under}: {tmp_path / 'a_file'} is a file, not a folder; pass {key}=<a path in a folder>"


def test_every_suggestion_in_a_refusal_is_accepted(tmp_path: Path):
    """Each refusal of the tables is asked again with its suggestion in place of the mistake: the check takes it (it
    may still refuse something else on that line, never the suggested key), and a suggestion is a whole `key=value`,
    never a placeholder (`<factory>`) or a bare key (`did you mean data?`)."""
    walked, wrong = 0, []
    for job, overrides in _rows(tmp_path):
        line = [f"paths.log_dir={tmp_path / 'logs'}", *overrides]
        message = refusal(job, line)
        for suggested in suggestions(message or ""):
            walked += 1
            key = suggested.split("=")[0]
            if "=" not in suggested and message and f"e.g. {suggested}" in message:
                continue  # an example of something else: a file name (`e.g. last.ckpt`)
            if "=" not in suggested or "<" in suggested:
                wrong.append(f"{message}\n  suggests {suggested!r}: not a value to type")
                continue
            offending = message.split(":")[0].split(" ")[0] if message else ""
            kept = [o for o in line if o != offending and o.split("=")[0].lstrip("+") != key]
            again = refusal(job, [*kept, suggested])
            if again is not None and again.startswith((f"{key}=", suggested)):
                wrong.append(f"{message}\n  suggests {suggested}, which is refused: {again}")
    assert walked >= 10, f"only {walked} suggestions found: the walk no longer reads the tables"
    assert not wrong, "\n".join(wrong)
