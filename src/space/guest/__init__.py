"""guest."""
