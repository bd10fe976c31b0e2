"""A sans-io decoder for `text/event-stream` lines."""

from __future__ import annotations

import json

from space.sdk._models import Event


class SSEDecoder:
    """Feed lines (without newline); an `Event` comes out at each blank line."""

    def __init__(self) -> None:
        self._id = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            return None
        payload = json.loads("\n".join(self._data))
        event = Event.from_sse(self._id, self._event or "message", payload)
        self._event, self._data = "", []
        return event
