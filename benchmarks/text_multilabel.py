"""Multi-label text: litforge's `data=text task=multilabel` (every default) and `experiment=text_multilabel` against
a linear model on word counts, same split.

The baseline is scikit-learn's one-vs-rest logistic regression on word counts (the same words litforge's tokenizer
reads: lowercased `\\b\\w+\\b`), trained on litforge's training split and scored on its test split at 0.5; litforge
is the real command line, its test macro-F1 read from the run's metrics.json. The goal: within 0.02.

    python benchmarks/text_multilabel.py                            (the embedded support messages)
    python benchmarks/text_multilabel.py --path my.jsonl -- model=text_transformer
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def linear_baseline(path: str | None) -> float:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.multiclass import OneVsRestClassifier

    from litforge.data.labelled_text import WORDS, LabelledTextDataModule

    data = LabelledTextDataModule(path=path)
    data.describe()  # reads the splits exactly as training does
    train, test = data.split_rows("train"), data.split_rows("test")
    words = CountVectorizer(token_pattern=WORDS, lowercase=True).fit([t for t, _, _ in train])
    names = data.class_names

    def hot(rows: list) -> list[list[int]]:
        return [[int(n in (labels or ())) for n in names] for _, labels, _ in rows]

    model = OneVsRestClassifier(LogisticRegression(max_iter=2000)).fit(
        words.transform([t for t, _, _ in train]), hot(train)
    )
    predicted = model.predict(words.transform([t for t, _, _ in test]))
    return float(f1_score(hot(test), predicted, average="macro", zero_division=0))


RUNS = {  # the command with every default (model=mlp on the mean word embedding), and the shipped recipe
    "data=text task=multilabel": ["data=text", "task=multilabel"],
    "experiment=text_multilabel": ["experiment=text_multilabel"],
}


def litforge_run(path: str | None, run: list[str], overrides: list[str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as logs:
        command = [sys.executable, str(ROOT / "train.py"), *run, f"paths.log_dir={logs}"]
        command += [*([f"data.path={path}"] if path else []), "callbacks.progress_bar=null", *overrides]
        began = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        seconds = time.perf_counter() - began
        metrics = json.loads(next(Path(logs).glob("*/runs/*/metrics.json")).read_text())
    return float(metrics["metrics"]["test/f1"]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=None, help="a .jsonl/.csv/.txt file (default: the embedded messages)")
    parser.add_argument("--seeds", type=int, default=3, help="litforge runs per command (seed=0, 1, ...): the median")
    parser.add_argument("overrides", nargs="*", help="more overrides for litforge's run, after --")
    args = parser.parse_args()
    baseline = linear_baseline(args.path)
    print("| model | test macro-F1 | difference (goal: >= -0.02) |\n|---|---|---|")
    print(f"| linear (one-vs-rest logistic regression on word counts) | {baseline:.4f} | |")
    for name, run in RUNS.items():  # seeds change the init and the batch order; the split stays (data.split_seed)
        runs = sorted(litforge_run(args.path, run, [*args.overrides, f"seed={s}"]) for s in range(args.seeds))
        ours, seconds = runs[len(runs) // 2]
        each = ", ".join(f"{f1:.4f}" for f1, _ in runs)
        label = f"litforge `{name}` {' '.join(args.overrides)} (median of {each}; {seconds:.0f} s wall)"
        print(f"| {label} | {ours:.4f} | {ours - baseline:+.4f} |", flush=True)


if __name__ == "__main__":
    main()
