"""Everything about checkpoints: atomic writes, safe loading and trust, resume rules, run folders, the callbacks that
save."""
