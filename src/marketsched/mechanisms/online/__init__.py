"""mechanisms/online."""
