"""mechanisms."""
