"""Evaluate a checkpoint: `python eval.py ckpt_path=<run>/checkpoints/last.ckpt` (see `python eval.py --help`)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from litforge import cli
from litforge.help import answer_help


@hydra.main(config_path="conf", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from litforge.eval import evaluate

    cli.print_summary("eval", cli.run_job(evaluate, cfg))


if __name__ == "__main__":
    answer_help("eval", Path(__file__).parent / "conf")  # `--help` alone: fast, without starting Hydra
    cli.prepare_command_line("eval")  # early checks (value types, log folder), resume=
    main()
