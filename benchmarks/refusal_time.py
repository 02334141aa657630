"""How long a user waits for the one-line refusal of a mistake in their own code: whole commands, fresh interpreters.

    python benchmarks/refusal_time.py --repeats 3

A temporary folder gets a tiny user package, `userpkg` (a datamodule whose `batch_size` is annotated `Count`, a task
subclassing litforge's ClassificationTask, their options in `userpkg/conf`), as docs/extending.md builds one; the
package is put on PYTHONPATH and its conf folder on Hydra's search path. One short training run writes a checkpoint
of the user's task. Then each mistake is run as the user types it, from that folder, through the root scripts:

- (a) `train.py data=user_data data.batch_size=0`: out of range for the user's `Count` argument;
- (b) `train.py task=user_task +task.temperature=2`: a key the user's task does not take;
- (c) `eval.py ckpt_path=<the user's checkpoint>` without `trusted_packages=[userpkg]`: the trust refusal;
- (d) `predict.py ckpt_path=<ckpt> trusted_packages=[userpkg]` whose task (`LogitsTask`) returns no `predicted`:
  the predict contract (judged on the recorded class's source before Hydra starts; a traceback before branch `api`).

Each row: the median wall time from the command's start to its exit (the goal is <= 3 s on 2 cores), the exit code,
whether the command imported torch (an extra, untimed run with `-X importtime`), whether it made a run folder, and
the error line. Commands are interleaved across repeats so that load drifts hit every row alike. `--entry litforge`
runs the console script (`litforge train ...`) instead of the root scripts; `--baseline <checkout>` times another
checkout's scripts in the same interleaved rounds (before/after a change, under the same load):

    mkdir /tmp/base && git archive main | tar -x -C /tmp/base && python benchmarks/refusal_time.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 3.0

PACKAGE = {
    "userpkg/__init__.py": '"""A user\'s own project: a datamodule and a task, beside litforge."""\n',
    "userpkg/data.py": '''
        """Random 8x8 grey images in three classes: a user's own datamodule, with a bounded argument."""

        import torch

        from litforge import Count, ImageDataModule


        class RandomImages(ImageDataModule):
            def __init__(self, batch_size: Count = 32, train_size: Count = 256, data_dir: str = "data") -> None:
                super().__init__(data_dir=data_dir, batch_size=batch_size)
                self.input_shape, self.num_classes, self.class_names = (1, 8, 8), 3, ["a", "b", "c"]
                self.train_size = train_size

            def load_arrays(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
                g = torch.Generator().manual_seed(0 if split == "train" else 1)
                n = self.train_size if split == "train" else 64
                images = torch.randint(0, 256, (n, 1, 8, 8), generator=g, dtype=torch.uint8)
                return images, torch.randint(0, 3, (n,), generator=g)
        ''',
    "userpkg/tasks.py": '''
        """A user's own tasks: litforge's classification, and one whose predictions lack `predicted`."""

        from typing import Any

        from litforge import ClassificationTask


        class UserTask(ClassificationTask):
            """litforge's classification task, as a user's own class."""


        class LogitsTask(UserTask):
            """Predicts raw logits under another key: predict.py's contract wants `predicted`."""

            def predict_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
                return {"logits": self(batch[0] if isinstance(batch, (tuple, list)) else batch)}
        ''',
    "userpkg/conf/data/user_data.yaml": """
        _target_: userpkg.data.RandomImages
        batch_size: 32
        train_size: 256
        data_dir: ${paths.data_dir}
        """,
    "userpkg/conf/task/user_task.yaml": """
        # @package _global_
        task:
          _target_: userpkg.tasks.UserTask
        objective:
          metric: val/acc
          mode: max
        """,
}

TRAIN = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
TRAIN += ["test_after_training=false", "callbacks.progress_bar=null", "print_config=false"]


def write_package(folder: Path) -> None:
    for name, text in PACKAGE.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def environment(folder: Path, root: Path = ROOT) -> dict[str, str]:
    paths = [str(folder), str(root / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}


def command(
    folder: Path, script: str, *overrides: str, log_dir: Path, root: Path = ROOT, entry: str = "scripts"
) -> list[str]:
    """The command a user types from `folder`: `python <root>/<script> ...`, or `litforge <job> ...` (entry)."""
    searchpath = f"hydra.searchpath=[file://{folder}/userpkg/conf]"
    start = [sys.executable, str(root / script)]
    if entry == "litforge":
        start = [str(Path(sys.executable).with_name("litforge")), script.removesuffix(".py")]
    return [*start, searchpath, f"paths.log_dir={log_dir}", *overrides]


def make_checkpoints(folder: Path) -> tuple[Path, Path]:
    """A checkpoint of the user's task (one short run), and a copy recorded as `LogitsTask` (same weights)."""
    log_dir = folder / "trained"
    cmd = command(folder, "train.py", "data=user_data", "task=user_task", *TRAIN, log_dir=log_dir)
    done = subprocess.run(cmd, cwd=folder, env=environment(folder), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"training the user's checkpoint failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    ckpt = next(log_dir.rglob("last.ckpt"))
    logits = folder / "logits_task.ckpt"
    relabel = (
        "import sys, torch; c = torch.load(sys.argv[1], weights_only=True); "
        "c['litforge']['task_class'] = 'userpkg.tasks.LogitsTask'; torch.save(c, sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", relabel, str(ckpt), str(logits)], check=True, env=environment(folder))
    return ckpt, logits


def cases(ckpt: Path, logits: Path) -> dict[str, tuple[str, list[str]]]:
    return {
        "(a) `train.py data=user_data data.batch_size=0`": ("train.py", ["data=user_data", "data.batch_size=0"]),
        "(b) `train.py task=user_task +task.temperature=2`": ("train.py", ["task=user_task", "+task.temperature=2"]),
        "(c) `eval.py ckpt_path=<user ckpt>` (no trusted_packages)": ("eval.py", [f"ckpt_path={ckpt}"]),
        "(d) `predict.py ckpt_path=<LogitsTask ckpt> trusted_packages=[userpkg]`": (
            "predict.py",
            [f"ckpt_path={logits}", "trusted_packages=[userpkg]"],
        ),
    }


HEAVY = ("torch", "pytorch_lightning", "lightning_fabric", "lightning")


def heavy_import_seconds(importtime: str) -> float:
    """Seconds spent importing torch and Lightning, from `-X importtime` lines (each import once: an import nested
    in another of them is not counted twice). The report lists children before their parent, indented by depth."""
    total, ancestors = 0.0, []  # (depth, inside a heavy import), walked from the parents down
    for line in reversed(importtime.splitlines()):
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        while ancestors and ancestors[-1][0] >= depth:
            ancestors.pop()
        inside = any(flag for _, flag in ancestors)
        heavy = name.strip().split(".")[0] in HEAVY
        if heavy and not inside:
            total += int(cumulative) / 1e6
        ancestors.append((depth, inside or heavy))
    return total


def run_once(
    folder: Path, script: str, overrides: list[str], root: Path, entry: str, importtime: bool = False
) -> dict[str, object]:
    log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=folder)) / "logs"
    cmd = command(folder, script, *overrides, "print_config=false", log_dir=log_dir, root=root, entry=entry)
    env = environment(folder, root)
    if importtime:
        env["PYTHONPROFILEIMPORTTIME"] = "1"  # -X importtime, for the console script too
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    errors = [line.replace(str(folder), "<tmp>") for line in done.stderr.splitlines() if "litforge: error:" in line]
    last = (done.stderr.strip().splitlines() or [""])[-1]
    result = {
        "seconds": seconds,
        "code": done.returncode,
        "error": errors[0] if errors else f"(no litforge error; last line: {last[:90]})",
        "traceback": "Traceback" in done.stderr,
        "run_folder": log_dir.exists() and any(log_dir.iterdir()),
        "torch": any(line.rsplit("|", 1)[-1].strip() == "torch" for line in done.stderr.splitlines()),
        "heavy": heavy_import_seconds(done.stderr),
    }
    shutil.rmtree(log_dir.parent, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    parser.add_argument("--entry", choices=["scripts", "litforge"], default="scripts", help="root scripts, or litforge")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout (e.g. `git archive main`, unpacked): its rows too"
    )
    args = parser.parse_args()
    roots = {"": ROOT} if args.baseline is None else {"this checkout": ROOT, "baseline": args.baseline.resolve()}
    folder = Path(tempfile.mkdtemp(prefix="litforge-refusal-")).resolve()
    try:
        write_package(folder)
        ckpt, logits = make_checkpoints(folder)
        arms = {
            (name, label): (script, overrides, root)
            for name, (script, overrides) in cases(ckpt, logits).items()
            for label, root in roots.items()
        }
        times: dict[tuple[str, str], list[float]] = {arm: [] for arm in arms}
        last: dict[tuple[str, str], dict[str, object]] = {}
        for r in range(args.repeats):
            for arm in list(arms) if r % 2 == 0 else list(reversed(arms)):
                last[arm] = run_once(folder, *arms[arm], entry=args.entry)
                times[arm].append(float(last[arm]["seconds"]))  # type: ignore[arg-type]
        probes = {arm: run_once(folder, *arms[arm], entry=args.entry, importtime=True) for arm in arms}
        load = os.getloadavg()[0]
        print(f"\n### Refusal time (median of {args.repeats} fresh interpreters; load average {load:.1f})\n")
        header = ["mistake", "seconds", "≤ 3 s", "exit", "torch imported (its and Lightning's imports, s)"]
        print("| " + " | ".join([*header, "run folder", "traceback", "error line"]) + " |")
        print("|---|---|---|---|---|---|---|---|")
        for name, label in arms:
            median = statistics.median(times[name, label])
            res, probe = last[name, label], probes[name, label]
            error = str(res["error"]).replace("|", "\\|")
            error = error if len(error) <= 110 else error[:107] + "..."
            torch = f"yes ({float(probe['heavy']):.1f})" if probe["torch"] else "no"  # type: ignore[arg-type]
            shown = f"{name}, {label}" if label else name
            cells = [shown, f"{median:.2f}", "yes" if median <= GOAL_S else "no", res["code"], torch]
            cells += ["yes" if res["run_folder"] else "no", "yes" if res["traceback"] else "no", error]
            print("| " + " | ".join(str(c) for c in cells) + " |")
        print("\nrepeats (s):")
        for (name, label), values in times.items():
            print(f"  {name[:3]} {label}: {[round(t, 2) for t in values]}")
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
