"""The generation job: sample text from a language-model checkpoint (needs only the checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.checkpointing.load import load_checkpoint
from litforge.config.settings import Generate, job_settings
from litforge.core.contracts import GenerateTask
from litforge.core.errors import ConfigError
from litforge.jobs.checks import check_at_start
from litforge.tasks.restore import inference_device, restore_task


def generate(cfg: DictConfig) -> dict[str, Any]:
    check_at_start(cfg, "generate")  # once per run: skipped where the command line's check passed it
    settings = job_settings(cfg, Generate)  # the job's own keys, typed
    path = str(settings.ckpt_path)
    task = restore_task(load_checkpoint(path), path, settings.trusted_packages).to(inference_device(settings.device))
    if not isinstance(task, GenerateTask):
        raise ConfigError(
            f"{path} is a {type(task).__name__} checkpoint, which does not generate text: pass a "
            "checkpoint of task=language_model (e.g. from `python train.py experiment=gpt_char`)"
        )
    samples = [
        task.generate_text(
            settings.prompt, settings.max_new_tokens, settings.temperature, settings.top_k, seed=settings.seed + i
        )
        for i in range(settings.num_samples)
    ]
    output_dir = Path(settings.paths.output_dir)
    for i, text in enumerate(samples):
        print(f"----- sample {i} -----\n{text}")
    (output_dir / "samples.txt").write_text("\n\n".join(samples))
    result = {
        "metrics": {},
        "samples": samples,
        "checkpoint": path,
        "output_dir": str(output_dir),
        "written": str(output_dir / "samples.txt"),
    }
    (output_dir / "samples.json").write_text(json.dumps(result, indent=2))
    return result
