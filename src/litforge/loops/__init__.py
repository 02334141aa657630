"""Training loops that drive a task's per-step loss themselves: several optimizer steps per Lightning step
(`steps_per_call`), pipeline schedules. Each owns its use of Lightning's loop internals (through litforge.compat)."""
