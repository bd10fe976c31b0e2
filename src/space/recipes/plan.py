"""A recipe checked against its build context before any work: every bound of
`space.recipes.parse`, the context's own bounds, and every COPY finding its files,
at most `MAX_COPY_FILES` of them in all (`RecipeError` naming the line otherwise).
The context is given by path and size only (`Sizes`): no file's bytes are read."""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Collection, Mapping

from space.recipes.parse import Copy, Recipe, RecipeError, parse

MAX_CONTEXT_BYTES = 256 << 20
MAX_CONTEXT_FILES = 10_000
#: The most files all the COPY steps of one build put, together.
MAX_COPY_FILES = 10_000

#: A build context by path: each file's size in bytes.
Sizes = Mapping[str, int]


def plan(text: str, args: Mapping[str, str] | None, context: Sizes) -> Recipe:
    """The recipe's steps, once it and its context are within every bound."""
    check_context(context)
    recipe = parse(text, args)
    paths, placed = sorted(context), 0
    for step in recipe.steps:
        if isinstance(step, Copy):
            placed += len(sources(context, step, paths))
            if placed > MAX_COPY_FILES:
                raise RecipeError(f"line {step.line}: COPY puts over {MAX_COPY_FILES} files")
    return recipe


def sources(
    context: Collection[str], step: Copy, paths: list[str] | None = None
) -> list[tuple[str, str]]:
    """(context path, image path) of every file a COPY puts: a file, or every file
    under a directory (RecipeError if a source matches nothing, or past
    `MAX_COPY_FILES`); `paths`: the context's paths, sorted."""
    paths = sorted(context) if paths is None else paths
    placed: list[tuple[str, str]] = []
    for source in step.sources:
        under = "" if source == "." else source.rstrip("/") + "/"
        files = [source] if source in context else _under(paths, under)
        if not files:
            raise RecipeError(f"line {step.line}: {source!r} is not in the build context")
        if len(placed) + len(files) > MAX_COPY_FILES:
            raise RecipeError(f"line {step.line}: COPY puts over {MAX_COPY_FILES} files")
        for path in files:
            relative = posixpath.basename(path) if path == source else path[len(under) :]
            dest = step.dest + relative if step.dest.endswith("/") or path != source else step.dest
            placed.append((path, dest))
    return placed


def _under(paths: list[str], prefix: str) -> list[str]:
    """The sorted `paths` that start with `prefix` (a bisected range, not a scan)."""
    start = bisect.bisect_left(paths, prefix)
    end = start
    while end < len(paths) and paths[end].startswith(prefix):
        end += 1
    return paths[start:end]


def check_context(context: Sizes) -> None:
    if len(context) > MAX_CONTEXT_FILES:
        raise RecipeError(f"a build context has at most {MAX_CONTEXT_FILES} files")
    if sum(context.values()) > MAX_CONTEXT_BYTES:
        raise RecipeError(f"a build context is at most {MAX_CONTEXT_BYTES >> 20} MiB")
    for path in context:
        normal = posixpath.normpath(path)
        if path != normal or normal.startswith(("/", "../")) or normal in ("..", "."):
            raise RecipeError(f"context path {path!r} must be relative and normalised")
