"""The vocabulary every layer shares, free of imports: user-facing errors and the contracts between parts."""
