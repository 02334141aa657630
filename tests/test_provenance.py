"""litforge.records.provenance on a throw-away git checkout: commit, dirty flag, diff, untracked files, resumed runs.

The end-to-end part (a real run's provenance.json, the commit in its checkpoints, eval.py printing it) is checked on
the module run of tests/test_cli.py, which costs no extra training run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from litforge.records import provenance


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "train.py").write_text("lr = 0.1\n")
    _git(root, "add", "train.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return root


def test_a_clean_checkout_records_its_commit_and_no_diff(tmp_path):
    root = _checkout(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    record = provenance.write_start(run, root)
    saved = json.loads((run / "provenance.json").read_text())
    assert saved["git"]["commit"] == _git(root, "rev-parse", "HEAD").strip() and saved["git"]["dirty"] is False
    assert saved["git"]["diff_file"] is None and not (run / "provenance.diff").exists()
    assert saved["status"] == "running" and saved["end"] is None and "torch" in saved["packages"]
    provenance.write_end(run, record, "finished")
    assert json.loads((run / "provenance.json").read_text())["status"] == "finished"


def test_a_dirty_checkout_writes_the_diff_and_names_untracked_files(tmp_path):
    root = _checkout(tmp_path)
    (root / "train.py").write_text("lr = 0.2\n")
    (root / "notes.txt").write_text("new\n")
    run = tmp_path / "run"
    run.mkdir()
    record = provenance.write_start(run, root)
    assert record["git"]["dirty"] is True and record["git"]["untracked"] == ["notes.txt"]
    assert "+lr = 0.2" in (run / "provenance.diff").read_text()
    origin = provenance.describe_origin({provenance.CHECKPOINT_KEY: provenance.summary(record)})
    assert origin.startswith(record["git"]["commit"]) and "uncommitted changes" in origin


def test_a_resumed_run_keeps_the_earlier_attempts_record_and_diff(tmp_path):
    root = _checkout(tmp_path)
    (root / "train.py").write_text("lr = 0.3\n")
    run = tmp_path / "run"
    run.mkdir()
    first = provenance.write_start(run, root)
    provenance.write_end(run, first, "stopped")
    _git(root, "checkout", "-q", "train.py")  # the code is clean again when the run resumes
    second = provenance.write_start(run, root)
    assert second["git"]["dirty"] is False and [p["status"] for p in second["previous"]] == ["stopped"]
    assert "+lr = 0.3" in (run / "provenance.1.diff").read_text() and not (run / "provenance.diff").exists()


def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    assert provenance.git_state(tmp_path)["commit"] is None
    assert provenance.describe_origin({}) == "unknown (the checkpoint records no git commit)"


def test_installed_packages_match_importlib_metadata(tmp_path):
    """The folder-name scan reads what importlib.metadata reads (canonical names, first sys.path entry wins), from a
    listing instead of parsing every METADATA file; a folder without a version in its name is read in full."""
    from importlib import metadata

    from litforge.records.provenance import canonical_name, installed_packages

    expected: dict[str, str] = {}
    for dist in metadata.distributions():
        if dist.metadata["Name"]:
            expected.setdefault(canonical_name(dist.metadata["Name"]), dist.version)
    assert installed_packages() == expected

    (tmp_path / "Some_Pkg-1.2.3.dist-info").mkdir()
    legacy = tmp_path / "legacy.egg-info"
    legacy.mkdir()
    (legacy / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: Legacy.Thing\nVersion: 0.9\n")
    shadowed = tmp_path / "later"
    (shadowed / "some_pkg-9.9.dist-info").mkdir(parents=True)
    assert installed_packages([str(tmp_path), str(shadowed)]) == {"some-pkg": "1.2.3", "legacy-thing": "0.9"}
