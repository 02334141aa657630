"""My additions to litforge: a CSV dataset, a net for it, a regression task, a strategy and a callback."""
