"""Does transfer pay? Pretrain a CNN on digits 0-4, fine-tune it on 5-9 from k examples per class, and compare with
the same recipe from scratch on the same k examples (test accuracy on all held-out 5-9 digits).

    python benchmarks/transfer_digits.py                 # k = 1 3 5 10, seeds 0 1 2 (about 6 minutes on 2 shared cores)
    python benchmarks/transfer_digits.py --shots 3 --seeds 0

Both arms run `experiment=transfer_digits` (frozen backbone for 10 epochs, then unfrozen at 0.1x lr); the scratch
arm drops the finetune callback so that its random backbone trains from the first step.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def run(overrides: list[str], out: Path) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import litforge.runtime.ranks  # noqa: F401  (registers the ${uid:} resolver)
    from litforge.jobs.train import train

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={out}",
                "print_config=false",
                "logger=csv",
                "callbacks.progress_bar=null",
                "callbacks.model_summary=null",
                "trainer.enable_progress_bar=false",
                *overrides,
            ],
        )
    out.mkdir(parents=True, exist_ok=True)
    return train(cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shots", type=int, nargs="+", default=[1, 3, 5, 10])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    logging.getLogger("lightning").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        pre = run(["model=cnn", "data.classes=[0,1,2,3,4]", "seed=0"], tmp_path / "pretrain")
        print(f"pretrained on digits 0-4: test/acc {pre['metrics']['test/acc']:.4f}", flush=True)
        rows = []
        for k in args.shots:
            accs: dict[str, list[float]] = {"transfer": [], "scratch": []}
            for seed in args.seeds:
                common = [
                    "experiment=transfer_digits",
                    f"data.train_per_class={k}",
                    f"seed={seed}",
                    f"data.split_seed={seed}",
                ]
                accs["transfer"].append(
                    run([*common, f"task.init_from={pre['best_checkpoint']}"], tmp_path / f"t{k}_{seed}")["metrics"][
                        "test/acc"
                    ]
                )
                accs["scratch"].append(
                    run([*common, "~callbacks.finetune"], tmp_path / f"s{k}_{seed}")["metrics"]["test/acc"]
                )
            rows.append((k, statistics.mean(accs["transfer"]), statistics.mean(accs["scratch"]), accs))
            print(f"k={k}: transfer {rows[-1][1]:.4f}  scratch {rows[-1][2]:.4f}  {accs}", flush=True)

    print("\n| examples per class | fine-tuned from 0-4 | from scratch |\n|---|---|---|")
    for k, t, s, _ in rows:
        print(f"| {k} | {t:.1%} | {s:.1%} |")


if __name__ == "__main__":
    main()
