"""docs/migrating.md, row by row: every everyday habit of lightning-hydra-template's users works in litforge or is
refused in one line that names litforge's spelling (litforge.cli.habits).

The rows are read from the page as written. A habit that works is checked as a run would be before it starts (the
real pre-run check, litforge.cli.preflight, on a config Hydra composes), in-process; a refused one must raise one
line holding litforge's spelling, and litforge's spelling must compose. Tags, `.env`, `debug=default` and
`trainer=ddp` also run end to end through the real command line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CONF, ROOT, run_cli, single_run, stub_checkpoint
from litforge.core.errors import LitforgeError

PAGE = ROOT / "docs" / "migrating.md"
STATUSES = ("works", "added", "alias", "refused", "other")


def table_rows(text: str) -> list[tuple[str, str, str]]:
    """(their spelling, litforge's cell, status) of every row of the page's tables, as written."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 3 and cells[2] in STATUSES:
            rows.append((cells[0], cells[1].replace("\\|", "|"), cells[2]))
    return rows


ROWS = table_rows(PAGE.read_text(encoding="utf-8"))


def code(cell: str) -> str:
    """The first `code span` of a cell ("" when it has none: "the same")."""
    found = re.search(r"`([^`]+)`", cell)
    return found.group(1) if found else ""


def command(text: str, ckpt: Path, tmp: Path) -> tuple[str, list[str], bool]:
    """(job, overrides, multirun) of `python <job>.py [-m] overrides` or of bare overrides (train's); environment
    assignments before `python` are dropped and placeholders filled."""
    text = text.replace("/path/to/ckpt/name.ckpt", str(ckpt)).replace("<file.ckpt>", str(ckpt))
    words = shlex.split(text.replace("<folder>", str(tmp)))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words.pop(0)
    job = "train"
    if words[:1] == ["python"]:
        job = Path(words[1]).stem
        words = words[2:]
    multirun = "-m" in words
    return job, [w for w in words if w != "-m"], multirun


def first_job(overrides: list[str]) -> list[str]:
    """A sweep's first job: each swept key at its first value (a glob, whose values Hydra finds later: dropped)."""
    from litforge.cli.command_line import parse, values

    parsed = parse(overrides) or []
    out = []
    for line, o in zip(overrides, parsed, strict=True):
        firsts = values(o)[:1] if o.is_sweep_override() else [None]
        out += [line if v is None else f"{line.split('=', 1)[0]}={v}" for v in firsts]
    return out


def check(job: str, overrides: list[str], multirun: bool, log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `python <job>.py [-m] overrides` meets before it starts; raises the refusal. The config must compose (the
    check hands a command line Hydra cannot compose to Hydra, unjudged)."""
    from litforge.cli import preflight
    from litforge.jobs import checks

    monkeypatch.setattr(checks, "gpus_here", lambda asked: (8, ""))  # judged as on a machine with 8 GPUs (trainer=gpu)
    judged = []
    job_check = preflight.check_job  # the job's declared checks (litforge.jobs.checks): reached once it composes
    monkeypatch.setattr(preflight, "check_job", lambda cfg, *a: (judged.append(cfg), job_check(cfg, *a)))
    args = [f"paths.log_dir={log_dir}", *overrides]
    if multirun:
        preflight.check_sweep(CONF, job, args)
    preflight.checked_overrides(CONF, job, first_job(args))
    assert judged, f"{job}: {overrides} does not compose"


def composes(spelling: str, ckpt: Path, tmp: Path) -> bool:
    """litforge's spelling (a command or bare overrides) composes and is not itself a habit refused."""
    from litforge.cli.command_line import compose, parse
    from litforge.cli.habits import check_habits

    job, overrides, _ = command(spelling, ckpt, tmp)
    overrides = first_job(overrides)
    check_habits(CONF, parse(overrides) or [])
    assert compose(CONF, job, [f"paths.log_dir={tmp}", *overrides]) is not None, f"{spelling} does not compose"
    return True


def make_recipe(target: str) -> str:
    """What `make <target>` runs: `make -n` where make is installed, else the target's lines in the Makefile."""
    if shutil.which("make"):
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
        return dry.stdout
    found = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"the Makefile has no target {target}"
    return found.group(1)


def test_the_page_states_its_counts():
    counts = {s: sum(1 for *_, status in ROWS if status == s) for s in STATUSES}
    stated = ", ".join(f"{counts[s]} {s}" for s in STATUSES) + f" ({len(ROWS)} rows)"
    assert f"Counts: {stated}." in PAGE.read_text(encoding="utf-8"), stated
    assert len(ROWS) >= 55 and counts["refused"] and counts["added"]


@pytest.mark.parametrize(("theirs", "ours", "status"), ROWS, ids=[code(r[0]) or r[0] for r in ROWS])
def test_each_habit_works_or_names_litforges_spelling(
    theirs: str, ours: str, status: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    ckpt = stub_checkpoint(tmp_path)
    spelling, their_code = code(ours), code(theirs)
    if their_code.startswith(".env"):  # read at start: test_a_dotenv_file_is_read_and_the_environment_wins
        assert status == "added" and ".env" in (ROOT / ".gitignore").read_text().splitlines()
        assert their_code != ".env.example" or (ROOT / spelling).is_file()
    elif their_code.startswith("make "):
        assert spelling in make_recipe(their_code.split()[1])
    elif status == "other":  # not a command litforge answers: litforge's spelling runs, or the file is there
        assert composes(spelling, ckpt, tmp_path) if spelling.startswith("python ") else (ROOT / spelling).exists()
    elif status == "refused":
        with pytest.raises(LitforgeError) as refusal:
            check(*command(their_code, ckpt, tmp_path), tmp_path, monkeypatch)
        message = str(refusal.value)
        said = [re.search(r"(?<![\w.+])" + re.escape(word), message) for word in spelling.split()]
        lines = refusal.value.lines  # one line a mistake (`-m hparams_search=mnist_optuna experiment=example`: two)
        assert all("\n" not in line for line in lines) and all(said), message  # each word whole: not `optimizer.lr`
        composes(spelling, ckpt, tmp_path)
    else:  # works, added, alias: their spelling as typed, and litforge's own where the row gives one
        check(*command(their_code, ckpt, tmp_path), tmp_path, monkeypatch)
        if "=" in spelling and spelling != their_code and not spelling.startswith("python -m"):
            composes(spelling, ckpt, tmp_path)


def test_the_env_file_reader_reads_what_python_dotenv_reads(tmp_path: Path):
    from litforge.cli.habits import read_env_file

    env = tmp_path / ".env"
    env.write_text('# secrets\nWANDB_API_KEY=abc123  # mine\nexport MY_VAR="/home/me/my path"\n\nEMPTY=\nnot a line\n')
    expected = {"WANDB_API_KEY": "abc123", "MY_VAR": "/home/me/my path", "EMPTY": ""}
    assert read_env_file(env) == expected
    try:
        from dotenv import dotenv_values
    except ImportError:
        return  # the reader above is what litforge uses then
    assert {k: v for k, v in dotenv_values(env).items() if v is not None} == expected


def test_tags_reach_the_trackers_config(tmp_path: Path):
    from litforge.cli.command_line import compose

    cfg = compose(CONF, "train", ["logger=[wandb,mlflow]", "tags=[mnist,experiment_X]", f"paths.log_dir={tmp_path}"])
    assert cfg is not None
    assert list(cfg.logger.wandb.tags) == list(cfg.logger.mlflow.tags) == ["mnist", "experiment_X"]


# ---- end to end through the real command line -----------------------------------------------------------------------
LIMITS = ["trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]


@pytest.mark.slow
def test_debug_default_with_tags_runs_and_records_the_tags(tmp_path: Path):
    result = run_cli("train.py", "debug=default", 'tags=["mnist","experiment_X"]', *LIMITS, log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    run = single_run(tmp_path, "debug")  # debug=default: its own folder, as there
    assert json.loads((run / "provenance.json").read_text())["tags"] == ["mnist", "experiment_X"]
    assert "DEBUG" in (run / "debug.log").read_text()  # the log level of debug=default
    assert not (run / "tensorboard").exists()  # no loggers


@pytest.mark.slow
def test_a_dotenv_file_is_read_and_the_environment_wins(tmp_path: Path):
    """`.env` in the folder the command runs from: read before the check (the value reaches the config), never over a
    variable the environment already has. Refused runs: nothing trains."""
    from conftest import _CliServer

    (tmp_path / ".env").write_text('export MIGRATE_EPOCHS="0"  # from .env\n')
    argv = [str(ROOT / "train.py"), f"paths.log_dir={tmp_path / 'logs'}", "trainer.max_epochs=${oc.env:MIGRATE_EPOCHS}"]
    for env, value in (({}, "'0'"), ({"MIGRATE_EPOCHS": "-5"}, "'-5'")):
        full = {k: v for k, v in os.environ.items() if k != "MIGRATE_EPOCHS"} | env
        result = _CliServer.get().run(argv, cwd=tmp_path, env=full, timeout=120)
        assert result.returncode == 1 and f"litforge: error: trainer.max_epochs={value}:" in result.stderr, (
            result.output[-2000:]
        )
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_trainer_ddp_composes_as_theirs_did(tmp_path: Path):
    result = run_cli("train.py", "trainer=ddp", "trainer.num_nodes=2", log_dir=tmp_path, extra_args=("--cfg", "job"))
    assert result.returncode == 0, result.output[-2000:]
    trainer = result.stdout.split("\ntrainer:\n", 1)[1]
    for line in ("accelerator: auto", "devices: 4", "num_nodes: 2", "sync_batchnorm: auto"):  # GPUs, else gloo on CPU
        assert f"  {line}\n" in trainer, trainer[:1500]
    assert "strategy:\n  name: auto" in result.stdout  # DDP when trainer.devices > 1
