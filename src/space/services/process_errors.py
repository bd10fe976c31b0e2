"""The process registry's own errors, apart from it so `api.errors` can map them
(`api.errors` → 409) without importing the registry:

    CommandNotRunning   input or a signal for a command that has ended (or never ran here)
"""

from __future__ import annotations


class CommandNotRunning(Exception):
    def __init__(self, command_id: str) -> None:
        super().__init__(f"command {command_id} is not running")
