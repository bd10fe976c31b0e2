"""The SPACE guest agent: runs inside each microVM, speaks `space.guest.protocol`.

Stdlib only, on the guest's own Python 3.11 runtime; nothing here may import
the host side. Entry point: `python -m space.guest`.
"""

__version__ = "0.1.0"
