"""litforge's configs as package data (`litforge.conf`): one YAML file per option, one folder per config group.

This folder stays at the top of the repository, where a template's user looks for it; `src/litforge/conf` is a
symlink to it, so a clone (`PYTHONPATH=src`), an editable install and a built wheel all import it as
`litforge.conf`. This file makes it a regular package: Hydra's `pkg://` config source (the search-path plugin in
src/hydra_plugins/litforge_searchpath) accepts only a folder with an `__init__.py`.
"""
