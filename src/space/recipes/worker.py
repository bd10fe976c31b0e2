"""Recipes checked in a child process (`space.recipes.check`) under its own CPU and
memory limits and a wall-clock deadline, at most `CONCURRENT` at once per
`RecipeChecker`: the event loop only waits, and the worst legal (or illegal) recipe
costs other tenants one bounded child. `check` answers the template the recipe is
`FROM`, or raises `RecipeError`: the child's (naming the line and the bound), or
what limit the child ran into."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping

from space.recipes.parse import RecipeError
from space.recipes.plan import Sizes

DEADLINE = 10.0  # seconds of wall clock for one check, its start included
CONCURRENT = 2
MAX_ANSWER = 64 << 10


class RecipeChecker:
    """At most `concurrent` checking children at once; more callers wait their turn."""

    def __init__(self, *, concurrent: int = CONCURRENT, deadline: float = DEADLINE) -> None:
        self._slots = asyncio.Semaphore(concurrent)
        self._deadline = deadline

    async def check(self, recipe: str, args: Mapping[str, str], context: Sizes) -> str:
        """The recipe's FROM template, once it and its context are within every bound."""
        request = json.dumps({"recipe": recipe, "args": dict(args), "context": dict(context)})
        async with self._slots:
            return await self._run(request.encode())

    async def _run(self, request: bytes) -> str:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "space.recipes.check",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(self._deadline):
                out, _ = await child.communicate(request)
        except TimeoutError:
            raise RecipeError(f"checking the recipe took over {self._deadline:g} s") from None
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        return _verdict(child.returncode, out)


def _verdict(returncode: int | None, out: bytes) -> str:
    try:
        answer = json.loads(out[:MAX_ANSWER]) if returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        why = f"checking the recipe ran out of its CPU or memory limit (exit {returncode})"
        raise RecipeError(why)
    if isinstance(answer.get("base"), str):
        return str(answer["base"])
    raise RecipeError(str(answer.get("error", "the recipe was refused")))
