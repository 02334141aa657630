"""Training loops that drive a task's per-step loss themselves: :mod:`litforge.loops.steps_per_call` runs several
optimizer steps per Lightning step. Each owns its use of Lightning's loop internals (through
litforge.runtime.compat)."""
