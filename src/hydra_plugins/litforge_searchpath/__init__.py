"""litforge's configs on Hydra's search path in any application: Hydra's documented mechanism for a library's configs.

Hydra imports every module of the `hydra_plugins` namespace package at start-up and asks each SearchPathPlugin to
add its folders. This one appends `pkg://litforge.conf` (the YAML files the wheel carries as package data), so an
application of one's own (`@hydra.main(config_path="conf", ...)`, `hydra.compose`, `litforge <job>` in a project
made by `litforge new`) composes `train`, `model=cnn`, `data=digits`, ... with its own folders searched first. It
imports nothing but Hydra: it runs on every start, also for `--help`.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

LITFORGE_CONF = "pkg://litforge.conf"


class LitforgeSearchPathPlugin(SearchPathPlugin):
    """Appends litforge's configs after the application's own, unless its primary config folder already is them."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not any(entry.path == LITFORGE_CONF for entry in search_path.get_path()):
            search_path.append(provider="litforge", path=LITFORGE_CONF)
