"""Every mistake a user can make on the command line ends with exit code != 0 and one clear message, no traceback,
and writes nothing: no run folder, not a byte in the folders of earlier runs.

One table: each row is (script, overrides built in a temporary folder, text the message must contain, id). Every row
runs against one log folder that already holds runs (a finished one and an interrupted one, `earlier_runs`): its
sha256 manifest (every file's path and hash, every folder) is the same after each row and after the whole table.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from conftest import CONF, TINY, make_image_folder, run_cli, single_run

pytestmark = pytest.mark.slow

Args = Callable[[Path, Path], list[str]]  # (tmp folder, a real checkpoint) -> overrides


def manifest(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its sha256, and every folder: what a refused command must leave as it was."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def earlier_runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A log folder holding earlier runs, and its manifest: a finished run (a real, small MLP checkpoint to truncate,
    or to resume with another model) and `interrupted`, its copy without metrics.json (what resume= continues)."""
    log_dir = tmp_path_factory.mktemp("earlier")
    result = run_cli(
        "train.py",
        *TINY,
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "test_after_training=false",
        log_dir=log_dir,
    )
    assert result.returncode == 0, result.output[-3000:]
    finished = single_run(log_dir)
    shutil.copytree(finished, finished.with_name("interrupted"))
    (finished.with_name("interrupted") / "metrics.json").unlink()
    return log_dir, manifest(log_dir)


@pytest.fixture(scope="module")
def checkpoint(earlier_runs) -> Path:
    """The finished run's last checkpoint (its folder: `ckpt.parents[1]`; the interrupted run: `_interrupted(ckpt)`)."""
    log_dir, _ = earlier_runs
    return next(p for p in (log_dir / "train" / "runs").glob("*/checkpoints/last.ckpt") if "interrupted" not in str(p))


def _interrupted(ckpt: Path) -> Path:
    return ckpt.parents[2] / "interrupted"


def _truncated(tmp: Path, ckpt: Path) -> list[str]:
    half = tmp / "half.ckpt"
    half.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    return [f"ckpt_path={half}"]


def _not_a_checkpoint(tmp: Path, _: Path) -> list[str]:
    (tmp / "notes.ckpt").write_text("these are my notes, not a checkpoint")
    return [f"ckpt_path={tmp / 'notes.ckpt'}"]


class _RunsCodeWhenUnpickled:
    """Unpickling this calls open(<marker>, "w"): the marker file appears if arbitrary code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.open, (self.marker, "w")


def _code_running_pickle(tmp: Path, _: Path) -> list[str]:
    torch.save({"state_dict": {}, "payload": _RunsCodeWhenUnpickled(tmp / "pwned")}, tmp / "evil.ckpt")
    return [f"ckpt_path={tmp / 'evil.ckpt'}"]


def _checkpoint_naming_code(tmp: Path, ckpt: Path) -> list[str]:
    """A valid (weights_only) checkpoint whose data config would call open(<marker>, "w") when instantiated."""
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["litforge"]["run_config"]["data"] = {"_target_": "builtins.open", "_args_": [str(tmp / "pwned"), "w"]}
    torch.save(checkpoint, tmp / "names_code.ckpt")
    return [f"ckpt_path={tmp / 'names_code.ckpt'}"]


def _mixed_images(what: str) -> Args:
    def build(tmp: Path, _: Path) -> list[str]:
        root = make_image_folder(tmp / "images", classes=("a", "b"), size=(8, 8), mode="L")
        make_image_folder(
            root, classes=("c",), size=(12, 12) if what == "sizes" else (8, 8), mode="L" if what == "sizes" else "RGB"
        )
        return ["data=image_folder", f"data.root={root}"]

    return build


def _empty_folder(tmp: Path, _: Path) -> list[str]:
    (tmp / "empty").mkdir()
    return ["data=image_folder", f"data.root={tmp / 'empty'}"]


def _text_file(content: bytes) -> Args:
    def build(tmp: Path, _: Path) -> list[str]:
        (tmp / "corpus.txt").write_bytes(content)
        return ["experiment=gpt_char", "data=text_file", f"data.path={tmp / 'corpus.txt'}"]

    return build


_ROWS = "a,b,label\n" + "".join(f"{i % 7},{i % 5},{'yes' if i % 3 else 'no'}\n" for i in range(40))


def _table(name: str, text: str, *overrides: str, encoding: str = "utf-8") -> Args:
    """A CSV file as users bring them, trained with data=csv (#39)."""

    def build(tmp: Path, _: Path) -> list[str]:
        (tmp / name).write_bytes(text.encode(encoding))
        return ["data=csv", f"data.path={tmp / name}", *overrides]

    return build


_MESSAGES = "".join(f'{{"text": "message {i} about {a}", "labels": ["{a}"]}}\n' for i, a in enumerate("ab" * 10))


def _messages(extra: str, task: str = "multilabel", encoding: str = "utf-8") -> Args:
    """Labelled texts as JSON lines (data=text) with one bad row `extra` at line 21."""

    def build(tmp: Path, _: Path) -> list[str]:
        (tmp / "m.jsonl").write_bytes((_MESSAGES + extra).encode(encoding))
        return ["data=text", f"data.path={tmp / 'm.jsonl'}", f"task={task}", "model=text_pool"]

    return build


def _test_only_label(tmp: Path, ckpt: Path) -> list[str]:
    (tmp / "test.jsonl").write_text('{"text": "my parcel is late", "labels": ["shipping"]}\n')
    return [*_messages("")(tmp, ckpt), f"data.test={tmp / 'test.jsonl'}"]


def _fixed(*overrides: str) -> Args:
    return lambda tmp, ckpt: [o.format(tmp=tmp, ckpt=ckpt) for o in overrides]


class Absent(str):
    """A needle the output must not hold (library noise before litforge's line, a folder that is not there)."""


CASES = [
    # config mistakes (caught by Hydra or before torch is imported)
    (
        "train.py",
        _fixed("model=resnt"),
        [
            "model=resnt is not an option of model",
            "did you mean model=resnet",
            ", ".join(sorted(p.stem for p in (CONF / "model").glob("*.yaml"))),
        ],
        "unknown-group-option",
    ),
    (
        "train.py",
        _fixed("trainer.max_epoch=3"),
        ["trainer.max_epoch=3", "did you mean trainer.max_epochs"],
        "unknown-key",
    ),
    (
        "train.py",
        _fixed("trainer.max_epochs=abc"),
        ["trainer.max_epochs='abc': expected an integer"],
        "wrong-value-type-int",
    ),
    ("train.py", _fixed("optimizer.lr=fast"), ["optimizer.lr='fast': expected a number"], "wrong-value-type-float"),
    ("train.py", _fixed("data=image_folder"), ["data.root"], "required-value-left-out"),
    (
        "train.py",
        _fixed("model=vit", "model.patch_size=3"),
        ["litforge: error", "patch_size", "8x8"],
        "incompatible-model-and-data",
    ),
    # data
    (
        "train.py",
        _fixed("data=image_folder", "data.root={tmp}/no_such_folder"),
        ["litforge: error", "no_such_folder", "does not exist"],
        "missing-data-folder",
    ),
    ("train.py", _empty_folder, ["litforge: error", "has no class sub-folders"], "empty-data-folder"),
    (
        "train.py",
        _mixed_images("sizes"),
        ["litforge: error", "images have different sizes", "data.image_size="],
        "mixed-image-sizes",
    ),
    ("train.py", _mixed_images("modes"), ["litforge: error", "data.channels=3"], "mixed-image-modes"),
    # checkpoints
    *[
        (
            script,
            _fixed("ckpt_path={tmp}/nope.ckpt"),
            ["litforge: error", "nope.ckpt", "does not exist"],
            f"missing-checkpoint-{script[:-3]}",
        )
        for script in ("train.py", "eval.py", "predict.py")
    ],
    ("train.py", _not_a_checkpoint, ["litforge: error", "not a readable"], "not-a-checkpoint"),
    ("eval.py", _truncated, ["litforge: error", "half.ckpt", "truncated or corrupt"], "truncated-checkpoint"),
    (
        "eval.py",
        _code_running_pickle,
        ["litforge: error", "refusing to load", "could run code"],
        "checkpoint-that-would-run-code",
    ),
    (
        "predict.py",
        _checkpoint_naming_code,
        ["litforge: error", "'builtins.open'", "could run arbitrary code"],
        "checkpoint-config-naming-code",
    ),
    (
        "train.py",
        _fixed("model=cnn", "ckpt_path={ckpt}"),
        ["litforge: error", "holds a different model"],
        "checkpoint-from-another-model",
    ),
    # hardware
    (
        "train.py",
        _fixed("trainer.accelerator=cpu", "trainer.devices=100000"),
        ["litforge: error", "trainer.devices=100000", "CPU cores"],
        "more-devices-than-the-machine",
    ),
    (  # took 7.6 s (Lightning refused it inside the job), printed it twice, named a run folder it then removed
        "train.py",
        _fixed("trainer=gpu"),
        ["litforge: error: trainer.accelerator=gpu: this machine has no GPU", "trainer=cpu", Absent("run folder:")],
        "gpu-without-a-gpu",
    ),
    (
        "train.py",
        _fixed("trainer.accelerator=tpu"),
        ["litforge: error", "torch_xla", "trainer=cpu"],
        "tpu-without-a-tpu",
    ),
    # ---- labelled texts (data=text): each row's problem named with its line and the fix ----
    ("train.py", _messages('{"text": " ", "labels": ["a"]}'), ["m.jsonl: line 21 has an empty `text`"], "text-empty"),
    (
        "train.py",
        _messages('{"body": "hello", "labels": ["a"]}'),
        ["m.jsonl: line 21 has no field `text` (its fields: body, labels)", "data.text="],
        "text-missing-field",
    ),
    (
        "train.py",
        _test_only_label,
        ["test.jsonl:1: label 'shipping' is not in the training rows (a, b)", "add training rows with it"],
        "text-label-only-in-test",
    ),
    (
        "train.py",
        _messages('{"text": "café crème", "labels": ["a"]}', encoding="latin-1"),
        ["m.jsonl: line 21 is not UTF-8", "data.encoding=latin-1"],
        "text-not-utf8",
    ),
    (
        "train.py",
        _messages('{"text": "no answer here", "labels": []}'),
        ["m.jsonl: line 21 has no labels (`labels`: [])", "give every row at least one", "or drop the row"],
        "text-row-without-labels",
    ),
    (
        "train.py",
        _messages("", task="classification"),
        ["the data's rows hold sets of labels (multi-label): pass task=multilabel"],
        "text-sets-of-labels-with-classification",
    ),
    ("train.py", _text_file(b""), ["litforge: error", "corpus.txt is empty"], "empty-text-file"),
    (
        "train.py",
        _text_file("café au lait".encode("latin-1") * 50),
        ["litforge: error", "corpus.txt is not UTF-8"],
        "text-file-not-utf8",
    ),
    # ---- #39 a refused command writes nothing ----
    (
        "train.py",
        lambda tmp, ckpt: [f"resume={_interrupted(ckpt)}", "task=regression"],
        ["litforge: error", "was written by task ClassificationTask", "resume with the same task="],
        "resume-with-another-task",
    ),
    (
        "train.py",
        lambda tmp, ckpt: [f"resume={ckpt.parents[1] / 'train.log'}"],
        ["litforge: error", "train.log is not a readable PyTorch checkpoint"],
        "resume-a-file-of-a-finished-run-that-is-no-checkpoint",
    ),
    (  # refused inside the job (Hydra had written .hydra/ and the log into the run's folder): put back as it was
        "train.py",
        lambda tmp, ckpt: [f"resume={_interrupted(ckpt)}", *_mixed_images("sizes")(tmp, ckpt)],
        ["litforge: error", "images have different sizes", "run folder:"],
        "resume-refused-inside-the-job",
    ),
    # ---- #39 sweeps ----
    (
        "train.py",
        _fixed("-m", "trainer.max_epochs=abc,2"),  # job 0 trained, then job 1 ended in a traceback
        ["litforge: error: trainer.max_epochs='abc': expected an integer"],
        "sweep-value-checked-before-its-first-job",
    ),
    # ---- #39 hints ----
    (
        "train.py",
        _fixed("+test=False"),
        ["+test=False: lightning-hydra-template's key, not litforge's", "test_after_training=False"],
        "added-key-nothing-reads",
    ),
    (
        "predict.py",
        _fixed("ckpt_path={ckpt}", "logger=null"),
        ["logger=null: predict has no `logger` group"],
        "no-group",
    ),
    (
        "train.py",
        _fixed("+trainer.limit_val_batches=0.2"),
        ["the validation data is 1 batch", "e.g. trainer.limit_val_batches=1"],
        "fraction-of-batches-rounds-to-none",
    ),
    (
        "predict.py",
        lambda tmp, ckpt: [(tmp / "a_file").write_text("x") and f"ckpt_path={ckpt}", f"output={tmp}/a_file/out.csv"],
        ["a_file/out.csv:", "a_file is a file, not a folder"],
        "output-under-a-file",
    ),
    (
        "predict.py",
        _fixed("ckpt_path={ckpt}", "trusted_packages=mypkg"),
        ["e.g. trusted_packages=[mypkg]"],
        "a-list-given-one-name",
    ),
    (
        "predict.py",
        _fixed("ckpt_path={ckpt}", "output={ckpt}"),
        ["would overwrite a file of the run", "pass output=<a new path>"],
        "output-onto-a-runs-checkpoint",  # was the checkpoint replaced by a CSV file
    ),
    (
        "predict.py",
        lambda tmp, ckpt: [
            (tmp / "rows.csv").write_text(_ROWS) and f"ckpt_path={ckpt}",
            f"input={tmp}/rows.csv",
            f"output={tmp}/rows.csv",
        ],  # fmt: skip
        ["output=", "rows.csv is also input=", "the output would replace it", "e.g. output=", "rows.predictions.csv"],
        "output-onto-its-own-input",  # was the user's data file replaced by the predictions
    ),
    (
        "train.py",
        _fixed("data=csv", "data.delimiter=;"),
        ["data.delimiter=;: Hydra's override grammar does not take ';' unquoted", "\"data.delimiter=';'\""],
        "a-sign-the-override-grammar-does-not-take",  # was Hydra's four-line lexer error
    ),
    (
        "train.py",
        _fixed("data=csv", "data.path={tmp}/données.csv"),
        ["données.csv' unquoted; quote the value", "in a shell: \"data.path='"],
        "a-path-with-an-accent",
    ),
    # ---- #39 tables ----
    (
        "train.py",
        _table("cities.csv", "city,label\n" + "Zürich,yes\nGenève,no\n" * 20, encoding="latin-1"),
        ["litforge: error: data.path=", "cities.csv: line 2 is not UTF-8", "data.encoding=latin-1"],
        "table-in-latin1",  # was a codec error naming neither data.path nor the file, after making a run folder
    ),
    (
        "train.py",
        _table("t.csv", _ROWS, "data.features=[a,b,label]"),
        ["litforge: error: data.features=[a,b,label]: it names the target label", "drop label from data.features"],
        "table-target-among-the-features",  # trained on the answer: test/acc 1.0
    ),
    (
        "train.py",
        _table("t.csv", "a,label\n" + "".join(f"{i},yes\n" for i in range(40))),
        ["litforge: error: data.target=label: every row of data.path=", "has the one class 'yes'"],
        "table-with-one-class",  # a torchmetrics traceback
    ),
    (
        "train.py",
        _table("t.csv", "label\n" + "yes\nno\n" * 20),
        ["litforge: error: data.path=", "no feature column, only the target 'label'"],
        "table-without-feature-columns",  # trained on zero features, exit 0
    ),
    (
        "train.py",
        _table("t.csv", _ROWS, "task=regression"),
        ["litforge: error: data.target=label: it holds text", "task=regression predicts numbers", "data.target_kind"],
        "table-text-target-with-regression",  # unexpected keyword argument 'num_classes'
    ),
    (
        "train.py",
        _table("t.csv", "a,y\n" + "".join(f"{i},{i * 0.37:.2f}\n" for i in range(400))),
        ["litforge: error: data.target=y: data.target_kind=auto reads its 400 distinct numbers as values"],
        "table-400-floats-with-classification",  # unexpected keyword argument 'num_targets'
    ),
    (
        "train.py",
        _table(
            "t.csv",
            "a,y\n" + "".join(f"{i},{i * 0.37:.2f}\n" for i in range(40)),
            "data.categorical=[y]",
            "task=regression",
        ),
        ["litforge: error: data.target=y: data.categorical lists it", "task=regression", "data.target_kind=value"],
        "table-target-in-categorical",  # trained a regression, data.categorical silently ignored
    ),
    # ---- #51 every failure one line ----
    (
        "train.py",
        _table("data.parquet", _ROWS),
        ["litforge: error: data.path=", "data.parquet: not a Parquet file", "a CSV file's name must end in .csv"],
        "a-csv-file-named-parquet",  # a pyarrow traceback
    ),
    (
        "train.py",
        _fixed("model._target_=mypkg.nope.Net"),
        ["model._target_=mypkg.nope.Net does not import: ModuleNotFoundError", Absent("Error getting object")],
        "a-target-that-does-not-import",  # Hydra's three "Error getting object" lines first
    ),
    (
        "train.py",
        lambda tmp, ckpt: [f"ckpt_path={ckpt.parents[2] / 'nope.ckpt'}"],
        ["litforge: error: checkpoint", "nope.ckpt does not exist. Pass ckpt_path=", Absent("The newest")],
        "a-missing-checkpoint-names-no-other-runs-checkpoints",
    ),
    # ---- #39 will it fit ----
    (
        "train.py",
        _fixed("model=gpt_7b", "strategy=fsdp", "trainer.devices=8", "trainer.num_nodes=100000", "dry_run=true"),
        ["litforge: error", "trainer.num_nodes=100000", "32768"],
        "cluster-past-any-real-one",
    ),
    # ---- #39 migrate ----
    (
        "train.py",
        _fixed("-m", "seed=1,2", "extras.print_config=false"),
        ["extras.print_config=false: lightning-hydra-template's key", "print_config=false", "docs/migrating.md"],
        "their-extras-key-in-a-sweep",
    ),
    (
        "train.py",
        _fixed("+trainer.accumulate_grad_batches=10"),
        ["trainer.accumulate_grad_batches is already a key", "set it without +: trainer.accumulate_grad_batches=10"],
        "their-plus-on-a-set-trainer-key",
    ),
]


@pytest.mark.parametrize(("script", "args", "needles"), [c[:3] for c in CASES], ids=[c[3] for c in CASES])
def test_bad_input_fails_with_one_clear_message(
    script: str, args: Args, needles: list[str], tmp_path: Path, checkpoint: Path, earlier_runs
):
    log_dir, _ = earlier_runs
    overrides = args(tmp_path, checkpoint)
    before, given = manifest(log_dir), manifest(tmp_path)  # the earlier runs, and the files the row wrote for itself
    result = run_cli(script, *overrides, "print_config=false", log_dir=log_dir)
    assert result.returncode != 0, result.output[-2000:]
    assert "Traceback" not in result.output, result.output[-4000:]
    errors = [line.split("litforge: error: ")[1] for line in result.output.splitlines() if "litforge: error:" in line]
    assert len(errors) == 1 and result.output.count(errors[0]) == 1, result.output[-4000:]  # one line, printed once
    for needle in needles:
        assert (needle not in result.output) == isinstance(needle, Absent), f"{needle!r}:\n{result.output[-2000:]}"
    assert "Epoch 0" not in result.output, "the mistake must be caught before training starts"
    assert not (tmp_path / "pwned").exists(), "loading a checkpoint ran code from it"
    after = manifest(log_dir)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the refused command wrote (or removed) in the log folder: {changed}"
    assert manifest(tmp_path) == given, "the refused command changed a file it was given"


@pytest.mark.parametrize("override", ["trainer=gpu", "ckpt_path=nope.ckpt"])
def test_refused_before_torch_is_imported(override: str, tmp_path: Path):
    """These took 7-8 s: the config check imported every target (torch, Lightning) before the refusal (a
    checkpoint of another model, `model=cnn ckpt_path=<mlp's>`, goes the same way as a missing one)."""
    from conftest import run_fresh_probe
    from litforge.jobs.checks import GPU_DEVICE_FILES

    if override == "trainer=gpu" and any(map(os.path.exists, GPU_DEVICE_FILES)):
        pytest.skip("a machine with a GPU device asks torch whether it can use it")
    result, imported = run_fresh_probe("train.py", override, log_dir=tmp_path / "logs", hash_seed=0)
    assert result.returncode == 1 and result.output.count("litforge: error:") == 1, result.output[-3000:]
    assert imported == [] and not (tmp_path / "logs").exists()


def test_a_slurm_sweep_is_not_judged_by_this_machines_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Its jobs run on the cluster's GPU nodes, submitted from a login node without one (hydra/launcher/slurm.yaml);
    a local sweep's jobs are judged here, before the first starts."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from litforge.cli.preflight import check_sweep
    from litforge.core.errors import ConfigError
    from litforge.jobs import checks

    monkeypatch.setattr(checks, "gpus_here", lambda asked: (0, "no GPU device in /dev"))
    sweep = ["trainer=gpu", "seed=1,2", f"paths.log_dir={tmp_path}"]
    check_sweep(CONF, "train", ["hydra/launcher=slurm", *sweep])
    with pytest.raises(ConfigError, match="trainer.accelerator=gpu: this machine has no GPU"):
        check_sweep(CONF, "train", sweep)


def test_the_whole_table_left_the_earlier_runs_as_they_were(earlier_runs):
    """After every row above (run before this test in the same worker, in file order): the earlier runs' manifest is
    the one taken when they were made, and no run folder was added beside them."""
    log_dir, at_start = earlier_runs
    now = manifest(log_dir)
    assert now == at_start, sorted(k for k in now.keys() | at_start.keys() if now.get(k) != at_start.get(k))
    assert len(list((log_dir / "train" / "runs").iterdir())) == 2, "a run folder was added"


# out-of-range values and runs that would do nothing, through the real CLI (the full table of such mistakes is judged
# in-process in tests/test_validation.py): (overrides, the one error line, caught before Hydra starts a job)
VALUES = [
    (["data.batch_size=0"], "data.batch_size=0: expected an integer >= 1, e.g. data.batch_size=64", True),
    (["optimizer.lr=-1"], "optimizer.lr=-1: expected a number > 0, e.g. optimizer.lr=0.001", True),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0: expected an integer >= 1, -1 or null", True),
    (["trainer.limit_train_batches=0"], "trainer.limit_train_batches=0: expected a fraction in (0, 1]", True),
    (["hparams_search=digits_optuna"], "add -m (python train.py -m hparams_search=digits_optuna)", True),
    (["model.hidden_dims=256"], "model.hidden_dims=256: expected a list of integers >= 1", True),
    (
        ["scheduler=step", "scheduler.scheduler.step_size=0"],
        "scheduler.scheduler.step_size=0: expected an integer",
        True,
    ),  # was a ZeroDivisionError traceback from inside the LR scheduler
    (["seed=-1"], "seed=-1: expected an integer in [0, 4294967295], e.g. seed=42", True),  # was a ValueError traceback
    (["+model.foo=1"], "model.foo is not an argument of litforge.models.mlp.MLP (it takes: ", True),  # signature
]


@pytest.mark.parametrize(("overrides", "line", "before_hydra"), VALUES, ids=[" ".join(v[0]) for v in VALUES])
def test_a_bad_value_stops_the_run_with_one_line_naming_key_value_and_example(
    overrides: list[str], line: str, before_hydra: bool, tmp_path: Path
):
    log_dir = tmp_path / "logs"
    result = run_cli("train.py", *overrides, "print_config=false", log_dir=log_dir)
    assert result.returncode == 1, result.output[-2000:]
    assert "Traceback" not in result.output and "Error in call to target" not in result.output, result.output[-4000:]
    errors = [text for text in result.output.splitlines() if "litforge: error:" in text]
    assert len(errors) == 1 and line in errors[0], result.output[-2000:]
    assert not [*log_dir.rglob("*.ckpt"), *log_dir.rglob("metrics.json"), *log_dir.rglob("events.out.*")]
    if before_hydra:  # not even a run folder: the mistake cost a fraction of a second
        assert not log_dir.exists(), sorted(log_dir.rglob("*"))


SEVERAL = [  # (script, overrides with independent mistakes, the line each must give, in order)
    (
        "train.py",
        ["data.batch_size=0", "optimizer.lr=-1", "trainer.max_epochs=abc"],
        [
            "data.batch_size=0: expected an integer >= 1",
            "optimizer.lr=-1: expected a number > 0",
            "trainer.max_epochs='abc'",
        ],
    ),
    ("predict.py", ["ckpt_path={ckpt}", "batch_size=0", "device=tpu"], ["batch_size=0: expected", "device='tpu'"]),
    ("export.py", ["ckpt_path={ckpt}", "formats=[tflite]", "opset=3"], ["opset=3: expected", "unknown export format"]),
    ("train.py", ["model=resnt", "data=digitz"], ["did you mean model=resnet?", "did you mean data=digits?"]),
    ("train.py", ["seed=-1", "float8=rowwise", "trainer.accelerator=cpu"], ["seed=-1: expected", "float8=rowwise"]),
    ("train.py", ["-m", "resume=auto", "logger=null,csv", "model=resnt"], ["continues one", "cannot switch", "resnt"]),
    ("train.py", ["lr=0.1", "data.batch_size=0"], ["did you mean optimizer.lr=0.1?", "data.batch_size=0"]),  # the rest
]


@pytest.mark.parametrize(("script", "overrides", "lines"), SEVERAL, ids=[" ".join(v[1]) for v in SEVERAL])
def test_every_mistake_of_a_command_gets_its_own_line_in_one_run(
    script: str, overrides: list[str], lines: list[str], checkpoint: Path, tmp_path: Path
):
    """Several independent mistakes: one `litforge: error:` line each, in one run, before any folder exists."""
    log_dir = tmp_path / "logs"
    result = run_cli(script, *[o.format(ckpt=checkpoint) for o in overrides], log_dir=log_dir)
    errors = [text for text in result.output.splitlines() if text.startswith("litforge: error:")]
    assert result.returncode == 1 and "Traceback" not in result.output, result.output[-3000:]
    assert len(errors) == len(lines), result.output[-3000:]
    assert all(want in got for want, got in zip(lines, errors, strict=True)), errors
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))


def test_checkpoint_loading_never_runs_code_in_process(tmp_path: Path):
    from litforge.checkpointing.load import load_checkpoint
    from litforge.core.errors import CheckpointError

    _code_running_pickle(tmp_path, tmp_path)
    with pytest.raises(CheckpointError, match="arbitrary unpickling"):
        load_checkpoint(tmp_path / "evil.ckpt")
    assert not (tmp_path / "pwned").exists()


def test_a_checkpoints_net_config_cannot_name_code_to_run(checkpoint: Path, tmp_path: Path):
    from litforge.core.errors import CheckpointError
    from litforge.tasks.restore import restore_task

    loaded = torch.load(checkpoint, weights_only=True)
    loaded["hyper_parameters"]["net"] = {"_target_": "os.system", "_partial_": True}
    with pytest.raises(CheckpointError, match="names 'os.system' to build"):
        restore_task(loaded, "crafted.ckpt")
    restore_task(torch.load(checkpoint, weights_only=True), str(checkpoint))  # a genuine one still loads


# ---- checkpoint refusals before torch (litforge.checkpointing.metadata) --------------------------------------------
def _relabelled(ckpt: Path, tmp: Path, task_class: str) -> Path:
    """The checkpoint as a user's own task would have written it: its recorded task class is theirs."""
    loaded = torch.load(ckpt, weights_only=True)
    loaded["litforge"]["task_class"] = task_class
    torch.save(loaded, tmp / "users.ckpt")
    return tmp / "users.ckpt"


# runs a root script in this fresh interpreter, then writes whether torch was ever imported (sys.modules keeps it)
_RECORD_TORCH = """
import runpy, sys
marker, script, sys.argv = sys.argv[1], sys.argv[2], sys.argv[2:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    open(marker, "w").write(str("torch" in sys.modules))
"""


@pytest.mark.parametrize("script", ["eval.py", "predict.py", "export.py", "generate.py"])
def test_an_untrusted_checkpoint_is_refused_before_torch_is_imported(script: str, checkpoint: Path, tmp_path: Path):
    """The trust refusal of a user's own checkpoint needs only its metadata: one line, exit 1, no run folder, and
    torch never imported (a count, not a time: machine load cannot move it)."""
    import subprocess
    import sys

    from conftest import ROOT

    users = _relabelled(checkpoint, tmp_path, "userpkg.tasks.UserTask")
    marker, log_dir = tmp_path / "torch_imported", tmp_path / "logs"
    argv = [str(ROOT / script), f"ckpt_path={users}", f"paths.log_dir={log_dir}"]
    done = subprocess.run(
        [sys.executable, "-c", _RECORD_TORCH, str(marker), *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    errors = [line for line in done.stderr.splitlines() if "litforge: error:" in line]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "names task class 'userpkg.tasks.UserTask'" in errors[0] and "trusted_packages=[userpkg]" in errors[0]
    assert marker.read_text() == "False", "torch was imported before the refusal"
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))


# a user's own tasks, beside litforge: one without the rows predict writes, one whose prediction lacks `predicted`
_USER_TASKS = """
from typing import Any

import pytorch_lightning as pl

from litforge import ClassificationTask


class PlainTask(pl.LightningModule):
    data_kind = ("image",)


class LogitsTask(ClassificationTask):
    def predict_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        return {"logits": self(batch)}
"""


@pytest.mark.parametrize(
    ("task", "says"),
    [
        ("PlainTask", "task `PlainTask` lacks `prediction_rows`, `answer_columns`: predict writes the rows the task"),
        ("LogitsTask", "`LogitsTask.predict_step` returned a mapping of ['logits'], without `predicted`: return"),
    ],
)
def test_predict_on_a_task_without_its_contract_is_refused_before_torch_is_imported(
    task: str, says: str, checkpoint: Path, tmp_path: Path
):
    """predict's task contract (litforge.PredictTask) is judged on the recorded class's source, with the job's own
    line: exit 1, no run folder, torch never imported (it was refused after torch, Lightning and a run folder)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "__init__.py").write_text(_USER_TASKS)
    users = _relabelled(checkpoint, tmp_path, f"userpkg.{task}")
    marker, log_dir = tmp_path / "torch_imported", tmp_path / "logs"
    argv = [str(ROOT / "predict.py"), f"ckpt_path={users}", "trusted_packages=[userpkg]", f"paths.log_dir={log_dir}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _RECORD_TORCH, str(marker), *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    errors = [line for line in done.stderr.splitlines() if "litforge: error:" in line]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and f"litforge: error: ckpt_path={users}: {says}" in errors[0], done.stderr[-3000:]
    assert marker.read_text() == "False", "torch was imported before the refusal"
    assert not log_dir.exists(), sorted(log_dir.rglob("*"))


def _crafted_checkpoints(ckpt: Path, tmp: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Files the full load refuses (and one it accepts), each with its `trusted_packages`."""
    loaded = lambda: torch.load(ckpt, weights_only=True)  # noqa: E731
    files: dict[str, tuple[Path, tuple[str, ...]]] = {}

    def save(name: str, obj: object, trusted: tuple[str, ...] = ()) -> None:
        torch.save(obj, tmp / f"{name}.ckpt")
        files[name] = (tmp / f"{name}.ckpt", trusted)

    files["missing"] = (tmp / "nope.ckpt", ())
    (tmp / "empty.ckpt").write_bytes(b"")
    files["empty"] = (tmp / "empty.ckpt", ())
    (tmp / "folder.ckpt").mkdir()
    files["folder"] = (tmp / "folder.ckpt", ())
    _not_a_checkpoint(tmp, ckpt)
    files["notes"] = (tmp / "notes.ckpt", ())
    _truncated(tmp, ckpt)
    files["truncated"] = (tmp / "half.ckpt", ())
    _code_running_pickle(tmp, ckpt)
    files["runs-code"] = (tmp / "evil.ckpt", ())
    _checkpoint_naming_code(tmp, ckpt)
    files["data-names-code"] = (tmp / "names_code.ckpt", ())
    save("a-list", [1, 2])
    save("no-litforge-entry", {k: v for k, v in loaded().items() if k != "litforge"})
    net_names_code = loaded()
    net_names_code["hyper_parameters"]["net"] = {"_target_": "os.system", "_partial_": True}
    save("net-names-code", net_names_code)
    no_data = loaded()
    no_data["litforge"]["run_config"].pop("data")
    save("no-data-config", no_data)
    users = loaded()
    users["litforge"]["task_class"] = "userpkg.tasks.UserTask"
    save("untrusted-task", users)
    users_data = loaded()
    users_data["litforge"]["run_config"]["data"]["_target_"] = "userpkg.data.Mine"
    save("untrusted-data", users_data)
    save("trusted-data", users_data, ("userpkg",))
    save("genuine", loaded())
    return files


def _refusal(check: Callable[..., object], *args: object) -> str | None:
    from litforge.core.errors import LitforgeError

    try:
        check(*args)
    except LitforgeError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _without_torchs_words(message: str | None) -> str | None:
    """A refusal without the words it quotes from torch's own exception (torch's reader is not run early)."""
    import re

    return message and re.sub(r"(truncated or corrupt: |could run code \().*?\)\. ", "...). ", message)


def test_the_early_check_refuses_exactly_what_the_full_load_refuses(checkpoint: Path, tmp_path: Path):
    """On each file: the torch-free check (litforge.checkpointing.metadata) and eval's own load (load_checkpoint,
    restore_task, the recorded data config) refuse alike, with the same line, and nothing in a file runs."""
    from omegaconf import OmegaConf

    from litforge.checkpointing.load import load_checkpoint, recorded_data_config
    from litforge.checkpointing.metadata import check_checkpoint_early
    from litforge.tasks.restore import restore_task

    def full(path: Path, trusted: tuple[str, ...]) -> None:
        loaded = load_checkpoint(path)
        restore_task(loaded, str(path), trusted)
        recorded_data_config(loaded, str(path), trusted)

    differ = []
    for name, (path, trusted) in _crafted_checkpoints(checkpoint, tmp_path).items():
        cfg = OmegaConf.create({"ckpt_path": str(path), "trusted_packages": list(trusted), "data": None})
        early, late = _refusal(check_checkpoint_early, cfg, "eval"), _refusal(full, path, trusted)
        if _without_torchs_words(early) != _without_torchs_words(late):
            differ.append(f"{name}:\n  early: {early}\n  full:  {late}")
        assert (late is None) == (name in ("genuine", "trusted-data")), f"{name}: {late}"
    assert not differ, "\n".join(differ)
    assert not (tmp_path / "pwned").exists(), "reading a checkpoint ran code from it"


class _Calls:
    """Unpickling this calls `func(*args)`: what a malicious file would ask for."""

    def __init__(self, func: Callable[..., object], *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_the_metadata_reader_runs_nothing_a_file_names(tmp_path: Path):
    """Hand-made torch.save-style zips whose pickle asks for code, in every pickle protocol (GLOBAL, STACK_GLOBAL,
    INST/OBJ in protocol 0): each is refused or left to torch, and no marker file appears."""
    import os
    import pickle
    import zipfile

    from litforge.checkpointing.metadata import read_checkpoint
    from litforge.core.errors import CheckpointError

    marker = tmp_path / "pwned"
    payloads = {
        "open": _Calls(builtins.open, str(marker), "w"),
        "os.system": _Calls(os.system, f"touch {marker}"),
        "exec": _Calls(builtins.exec, f"open({str(marker)!r}, 'w')"),
        "eval-in-a-tensor-slot": _Calls(builtins.eval, f"open({str(marker)!r}, 'w')"),
    }
    for name, payload in payloads.items():
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            path = tmp_path / f"{name}-{protocol}.ckpt"
            with zipfile.ZipFile(path, "w") as archive:
                data = pickle.dumps({"state_dict": {}, "litforge": {"task_class": payload}}, protocol=protocol)
                archive.writestr("archive/data.pkl", data)
            try:
                result = read_checkpoint(path)
            except CheckpointError as exc:
                assert "refusing to load" in str(exc), exc
            else:
                assert result is None, f"{name}, protocol {protocol}: read as {result}"
            assert not marker.exists(), f"{name}, protocol {protocol}: reading the file ran code"
