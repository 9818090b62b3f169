"""behaviour."""
