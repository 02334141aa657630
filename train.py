"""Train a model: `python train.py [group=option ...] [key=value ...]` (see `python train.py --help`)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from litforge import cli
from litforge.help import answer_help


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from litforge.train import train

    result = cli.run_job(train, cfg)
    cli.print_summary("train: final metrics", result)
    return result["objective"]["value"]  # what a sweeper (Optuna) optimises


if __name__ == "__main__":
    answer_help("train", Path(__file__).parent / "conf")  # `--help` alone: fast, without starting Hydra
    cli.prepare_command_line("train")  # early checks (value types, log folder), resume=
    main()
