"""mechanisms/clearing."""
