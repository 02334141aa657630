"""What a run leaves for people: trackers, provenance, metrics as floats, sweep summaries and aggregates."""
