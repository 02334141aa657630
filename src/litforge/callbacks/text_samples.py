"""Log generated text to TensorBoard after validation: watching samples is the quickest check a language model
is learning (and of what)."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger

log = logging.getLogger(__name__)


class TextSamples(pl.Callback):
    """Every `every_n_epochs` validations, sample `max_new_tokens` from `prompt` and log it as TensorBoard text."""

    def __init__(self, prompt: str = "", max_new_tokens: int = 200, temperature: float = 0.8,
                 top_k: int | None = None, every_n_epochs: int = 1, seed: int = 0) -> None:
        self.prompt, self.max_new_tokens, self.temperature, self.top_k = prompt, max_new_tokens, temperature, top_k
        self.every_n_epochs, self.seed = every_n_epochs, seed

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or trainer.current_epoch % self.every_n_epochs:
            return
        text = pl_module.generate_text(self.prompt, self.max_new_tokens, self.temperature, self.top_k, self.seed)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                # markdown code block: keeps the sample's line breaks and spaces in TensorBoard's text tab
                logger.experiment.add_text("samples", "```\n" + text + "\n```", trainer.global_step)
        log.info("sample at step %d:\n%s", trainer.global_step, text)
