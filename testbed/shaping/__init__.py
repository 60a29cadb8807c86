"""Link shaping: one meaning, two backends (kernel netem, userspace `wire` emulator)."""
