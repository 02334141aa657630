"""Sample text from a language model: `python generate.py ckpt_path=<run>/checkpoints/last.ckpt prompt="def "`."""

import hydra
from omegaconf import DictConfig

from litforge import cli


@hydra.main(config_path="conf", config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from litforge.generate import generate

    result = cli.run_job(generate, cfg)
    print(f"samples written to {result['output_dir']}/samples.txt")


if __name__ == "__main__":
    main()
