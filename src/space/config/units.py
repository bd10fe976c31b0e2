"""Byte units the sub-configs' defaults and bounds are written in."""

GIB = 1024**3
MIB = 1024**2
