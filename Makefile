# The make targets of lightning-hydra-template, for those who come from it (docs/migrating.md): each runs the command
# litforge's README gives for it.

help:  ## Show the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | awk 'BEGIN {FS = ":.*## "}; {printf "%-12s %s\n", $$1, $$2}'

test:  ## The fast tests (not the end-to-end runs marked slow)
	pytest -m "not slow"

test-full:  ## Every test, as CI runs them
	pytest

train:  ## Train the default model
	python train.py

format:  ## ruff and the other pre-commit hooks on every file
	pre-commit run -a

clean-logs:  ## Delete every run folder under logs/
	rm -rf logs/*

.PHONY: help test test-full train format clean-logs
