"""mechanisms/games."""
