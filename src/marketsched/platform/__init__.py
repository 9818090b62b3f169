"""The platform every live market runs on (see docs/architecture.md)."""
