"""Log generated text to TensorBoard after validation: watching samples is the quickest check a language model
is learning (and of what).

Every rank generates, rank 0 logs. Under `strategy=fsdp/tp/fsdp_tp` the net's blocks are sharded: each forward
all-gathers (FSDP2) or reduces (tensor parallel) across the ranks, so a sample drawn on rank 0 alone waits forever
on ranks that went on (issue 18: `experiment=gpt_char strategy=fsdp trainer.devices=2` hung at its first
validation). All ranks draw from one seed, so they feed the same tokens to every forward: tensor parallelism needs
identical inputs on its ranks, and every rank ends with the same text. Under `strategy=pipeline` no rank holds the
whole net (each builds only its stages), so no sample is drawn (one warning).
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger
from torch import nn

from litforge.core.bounds import Count, Positive, Seed
from litforge.core.contracts import net_of
from litforge.models.meta import is_meta

log = logging.getLogger(__name__)


class TextSamples(pl.Callback):
    """Every `every_n_epochs` validations, sample `max_new_tokens` from `prompt` and log it as TensorBoard text.

    `seed` fixes the sampling noise (the same seed each time shows how one draw changes as the model learns); null
    draws a new sample each time, from a seed all ranks share (the global step).
    """

    def __init__(
        self,
        prompt: str = "",
        max_new_tokens: Count = 200,
        temperature: Positive = 0.8,
        top_k: Count | None = None,
        every_n_epochs: Count = 1,
        seed: Seed | None = 0,
    ) -> None:
        self.prompt, self.max_new_tokens, self.temperature, self.top_k = prompt, max_new_tokens, temperature, top_k
        self.every_n_epochs, self.seed = every_n_epochs, seed
        self.last_sample: str | None = None  # the latest text, on every rank
        self.skipped = False

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.current_epoch % self.every_n_epochs:
            return
        net = net_of(pl_module)
        if isinstance(net, nn.Module) and is_meta(net):  # strategy=pipeline: each rank holds only its own stages
            if not self.skipped:
                log.warning("text samples skipped: the net is split over pipeline ranks (try generate.py)")
                self.skipped = True
            return
        seed = self.seed if self.seed is not None else trainer.global_step
        # the concrete module's method: nn.Module.__getattr__ is typed Tensor | Module
        text = pl_module.generate_text(self.prompt, self.max_new_tokens, self.temperature, self.top_k, seed)  # type: ignore[operator]
        self.last_sample = text
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                # markdown code block: keeps the sample's line breaks and spaces in TensorBoard's text tab
                logger.experiment.add_text("samples", "```\n" + text + "\n```", trainer.global_step)
        log.info("sample at step %d:\n%s", trainer.global_step, text)
