"""Recipes checked in a limited child process (`space.recipes.worker`): a refusal
names the line and the bound, a child past its deadline or its limits is killed and
named, the limits hold before any input is read, and at most `concurrent` children
run at once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from space.recipes.parse import RecipeError
from space.recipes.worker import RecipeChecker
from tests.recipes.test_parse import _doubling

pytestmark = pytest.mark.templates


async def test_a_good_recipe_answers_its_base() -> None:
    recipe = "FROM python\nCOPY app/ /srv/\nRUN true\n"
    assert await RecipeChecker().check(recipe, {}, {"app/main.py": 10}) == "python"


@pytest.mark.parametrize("lines", [16, 40])
async def test_a_doubling_recipe_is_refused_by_the_child_naming_the_line(lines: int) -> None:
    started = time.monotonic()
    with pytest.raises(RecipeError, match=r"line \d+: (expands to|ARG and ENV hold) \d+ bytes"):
        await RecipeChecker().check(_doubling(lines), {}, {})
    assert time.monotonic() - started < 5.0  # a timeout, not a benchmark


async def test_a_child_past_its_deadline_is_killed_and_named() -> None:
    with pytest.raises(RecipeError, match="took over 0.001 s"):
        await RecipeChecker(deadline=0.001).check("FROM base\n", {}, {})


def test_the_child_limits_its_memory_before_reading_input() -> None:
    grab = "from space.recipes.check import limit; limit(); bytearray(1 << 30)"
    ran = subprocess.run([sys.executable, "-c", grab], capture_output=True, text=True, check=False)
    assert ran.returncode != 0 and "MemoryError" in ran.stderr, ran.stderr


async def test_at_most_concurrent_children_run_at_once() -> None:
    checker, running, most = RecipeChecker(concurrent=2), 0, 0
    original = checker._run

    async def counted(request: bytes) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            return await original(request)
        finally:
            running -= 1

    checker._run = counted  # type: ignore[method-assign]
    bases = await asyncio.gather(*(checker.check(f"FROM t{i}\n", {}, {}) for i in range(6)))
    assert bases == [f"t{i}" for i in range(6)] and most == 2
