"""The credential broker's control plane: sealing, the credential model, scope
resolution into per-sandbox views, rate limits and the hash-chained audit."""
