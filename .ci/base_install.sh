#!/usr/bin/env bash
# The base install alone, as a stranger gets it: the wheel built from this clone, installed into a fresh virtual
# environment with exactly the distributions pip resolves for it (no dev tools, no extras), then `litforge train`,
# `eval` and `predict` from an empty folder outside the clone. The suite cannot show this: its environment holds
# every extra and every dev tool, so a module the base install lacks (pydantic, once) imports there all the same.
# Usage: .ci/base_install.sh [work folder] (default: a new temporary folder, removed at the end).
set -euo pipefail
clone="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
[ -n "${1:-}" ] || trap 'rm -rf "$work"' EXIT
python="${PYTHON:-python3}"

# the wheel, built offline with the caller's setuptools (CI's environment has it: pyproject's dev extra); setuptools'
# scratch folder goes first (it packs what an earlier build left there, a module since removed included) and after
rm -rf "$clone/build"
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$clone"
wheel="$(ls "$work"/dist/litforge-*.whl)"
rm -rf "$clone/build"

# a fresh environment holding the wheel and what pip resolves for it (pip's own configuration: index, find-links)
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"
"$work/venv/bin/python" -m pip list --format=freeze > "$work/base.txt"
echo "base install: $(wc -l < "$work/base.txt") distributions"
if grep -iE '^(pytest|ruff|mypy|mlflow|wandb|litdata|gymnasium|optuna|onnx|onnxruntime|torchao|pyarrow|submitit)==' \
    "$work/base.txt"; then
  echo "base install holds a dev or extra package (above)" >&2; exit 1
fi

# a stranger's first runs, from an empty folder outside the clone, with nothing of the clone on the path
mkdir "$work/empty" && cd "$work/empty"
export PATH="$work/venv/bin:$PATH" PYTHONPATH="" PYTHONNOUSERSITE=1
unset VIRTUAL_ENV
tiny=(trainer.max_epochs=1 trainer.limit_train_batches=4 trainer.limit_val_batches=2 trainer.limit_test_batches=2
      callbacks.progress_bar=null)
litforge train "${tiny[@]}" 2>&1 | tee "$work/train.out"
ckpt="$(grep -A1 '^best checkpoint:' "$work/train.out" | tail -1)"
[ -f "$ckpt" ] || { echo "no best checkpoint printed by litforge train" >&2; exit 1; }
litforge eval "ckpt_path=$ckpt" trainer.limit_test_batches=2 2>&1 | tee "$work/eval.out"
grep -q "test/acc" "$work/eval.out"
litforge predict "ckpt_path=$ckpt" 2>&1 | tee "$work/predict.out"
find logs -name predictions.csv | grep -q . || { echo "litforge predict wrote no predictions.csv" >&2; exit 1; }
case "$(python -c 'import litforge; print(litforge.__file__)')" in
  "$work/venv/"*) ;;
  *) echo "litforge was not imported from the installed wheel" >&2; exit 1 ;;
esac
if grep -n "Error importing\|Traceback\|ModuleNotFoundError" "$work"/{train,eval,predict}.out; then
  echo "the base install's runs printed an import failure (above): an extra imported where every run goes" >&2; exit 1
fi
echo "base install: train, eval and predict ran (${SECONDS} s in all)"
