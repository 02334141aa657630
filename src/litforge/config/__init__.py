"""Config values as the code receives them: typed checks, instantiation with one-line errors, durations."""
