"""litforge's configs on Hydra's search path in any application: Hydra's documented mechanism for a library's configs.

Hydra imports every module of the `hydra_plugins` namespace package at start-up and asks each SearchPathPlugin to
add its folders. This one appends `pkg://litforge.conf` (the YAML files the wheel carries as package data), so an
application of one's own (`@hydra.main(config_path="conf", ...)`, `hydra.compose`, `litforge <job>` in a project
made by `litforge new`) composes `train`, `model=cnn`, `data=digits`, ... with its own folders searched first. It
imports nothing but Hydra: it runs on every start, also for `--help`.

The user's folders win: Hydra appends `hydra.searchpath` entries and `--config-dir` after the plugins' folders, so a
user's `conf/task/regression.yaml` would lose to litforge's own `task=regression` without a word. The `litforge`
command (and `python <job>.py`) names those folders in :data:`USER_FIRST` before Hydra starts, and this plugin puts
them before litforge's configs.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin

LITFORGE_CONF = "pkg://litforge.conf"
#: the user's config folders (`file://...`, `pkg://...`), searched in this order before litforge's own; Hydra's
#: plugin scan runs this module again (hydra/core/plugins.py), so a list set before the scan is kept
USER_FIRST: list[str] = globals().get("USER_FIRST", [])


class LitforgeSearchPathPlugin(SearchPathPlugin):
    """Appends litforge's configs after the application's own, unless its primary config folder already is them;
    the folders of USER_FIRST go before both, right after Hydra's own configs."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for folder in reversed(USER_FIRST):  # each right after Hydra's own: the first one ends up first
            search_path.append(provider="litforge-user", path=folder, anchor=SearchPathQuery(provider="hydra"))
        if not any(entry.path == LITFORGE_CONF for entry in search_path.get_path()):
            search_path.append(provider="litforge", path=LITFORGE_CONF)
