"""One module per group of `/v1` operations."""
