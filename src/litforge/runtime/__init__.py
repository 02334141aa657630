"""Facts and guards of the running process: ranks and multirun, host reads, the watchdog, and compat (every private
library name)."""
