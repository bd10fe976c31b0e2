"""Recipes: the Dockerfile subset a template is built from, parsed into steps.

Supported: `FROM <template>` (a template of this node, first and once), `RUN <shell>`
(shell form) or `RUN ["exe", "arg"]` (exec form), `COPY`/`ADD <src>... <dst>` of files
in the build context (no URLs, no `--from`, no archive unpacking), `ENV k=v ...` or
`ENV k v`, `WORKDIR <dir>`, `USER <name>`, `ARG name[=default]`. `$name` and
`${name}` are replaced in every instruction after FROM from the ARGs and ENVs so far
(a build's `args` override ARG defaults; an unset name is empty). Comments, blank
lines and `\\` line continuations as in a Dockerfile. Everything else is refused with
the line number, as are more than `MAX_STEPS` instructions or `MAX_BYTES` of text, an
instruction that expands past `MAX_EXPANDED` bytes, ARG and ENV values past
`MAX_ENV_BYTES` together, and a COPY of more than `MAX_COPY_SOURCES` sources. The
bounds are checked before anything is built, so parsing is linear in the recipe.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MAX_BYTES = 1 << 20
MAX_STEPS = 256
#: The most bytes one instruction (or one exec-form word) expands to.
MAX_EXPANDED = 64 << 10
#: The most bytes of all ARG and ENV values together (every RUN carries them).
MAX_ENV_BYTES = 64 << 10
#: The most sources one COPY names.
MAX_COPY_SOURCES = 64
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RecipeError(ValueError):
    """A recipe that cannot be built as written (the message names the line)."""


@dataclass(frozen=True)
class Run:
    line: int
    argv: tuple[str, ...] | None  # exec form
    shell: str | None  # shell form, run with /bin/sh -c
    env: dict[str, str]
    workdir: str
    user: str | None


@dataclass(frozen=True)
class Copy:
    line: int
    sources: tuple[str, ...]  # paths in the context, normalised, never above it
    dest: str  # absolute in the image (a directory when it ends in / or has several sources)
    user: str | None


@dataclass(frozen=True)
class Recipe:
    base: str
    steps: tuple[Run | Copy, ...]
    env: dict[str, str] = field(default_factory=dict)  # what every sandbox process gets
    workdir: str = "/"
    user: str | None = None


@dataclass
class _State:
    args: dict[str, str]
    given: Mapping[str, str]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str | None = None
    steps: list[Run | Copy] = field(default_factory=list)

    def expand(self, line: int, text: str) -> str:
        """`text` with its variables replaced; its size is known before it is built, so
        a doubling chain is refused at once."""
        values = {**self.args, **self.env}
        matches = list(_VARIABLE.finditer(text))
        size = len(text) + sum(len(values.get(m[1] or m[2], "")) - len(m[0]) for m in matches)
        if size > MAX_EXPANDED:
            raise RecipeError(f"line {line}: expands to {size} bytes, over {MAX_EXPANDED}")
        return _VARIABLE.sub(lambda m: values.get(m.group(1) or m.group(2), ""), text)

    def check_env(self, line: int) -> None:
        size = sum(len(k) + len(v) for k, v in (*self.args.items(), *self.env.items()))
        if size > MAX_ENV_BYTES:
            raise RecipeError(f"line {line}: ARG and ENV hold {size} bytes, over {MAX_ENV_BYTES}")


def parse(text: str, args: Mapping[str, str] | None = None) -> Recipe:
    """The recipe `text` says, with build arguments `args` (RecipeError if it cannot)."""
    if len(text.encode()) > MAX_BYTES:
        raise RecipeError(f"a recipe is at most {MAX_BYTES} bytes")
    instructions = list(_instructions(text))
    if len(instructions) > MAX_STEPS:
        raise RecipeError(f"a recipe has at most {MAX_STEPS} instructions")
    if not instructions or instructions[0][1] != "FROM":
        raise RecipeError("line 1: a recipe starts with FROM <template>")
    line, _, base = instructions[0]
    if len(base.split()) != 1:
        raise RecipeError(f"line {line}: FROM takes one template name")
    state = _State(args={}, given=dict(args or {}))
    for line, keyword, rest in instructions[1:]:
        _apply(state, line, keyword, rest)
    return Recipe(base, tuple(state.steps), dict(state.env), state.workdir, state.user)


def _apply(state: _State, line: int, keyword: str, rest: str) -> None:
    if keyword == "ARG":
        name, _, default = rest.partition("=")
        _check_name(line, name)
        state.args[name] = state.given.get(name, default)
        state.check_env(line)
        return
    if keyword == "RUN":
        state.steps.append(_run(state, line, rest))
        return
    rest = state.expand(line, rest)
    if keyword in ("COPY", "ADD"):
        state.steps.append(_copy(state, line, keyword, rest))
    elif keyword == "ENV":
        state.env.update(_env_pairs(line, rest))
        state.check_env(line)
    elif keyword == "WORKDIR":
        state.workdir = posixpath.normpath(posixpath.join(state.workdir, rest.strip()))
    elif keyword == "USER":
        if len(rest.split()) != 1:
            raise RecipeError(f"line {line}: USER takes one name")
        state.user = rest.strip()
    else:
        raise RecipeError(f"line {line}: {keyword} is not supported in a recipe")


def _run(state: _State, line: int, rest: str) -> Run:
    """A RUN step: its shell text is left to the shell (which sees the env), an exec
    form's words are expanded here."""
    env = {**state.args, **state.env}
    if rest.lstrip().startswith("["):
        argv = tuple(state.expand(line, word) for word in _json_list(line, rest))
        return Run(line, argv, None, env, state.workdir, state.user)
    return Run(line, None, rest, env, state.workdir, state.user)


def _copy(state: _State, line: int, keyword: str, rest: str) -> Copy:
    words = _json_list(line, rest) if rest.lstrip().startswith("[") else shlex.split(rest)
    if any(w.startswith("--") for w in words):
        raise RecipeError(f"line {line}: {keyword} takes no flags here")
    if len(words) < 2:
        raise RecipeError(f"line {line}: {keyword} <source>... <destination>")
    if len(words) - 1 > MAX_COPY_SOURCES:
        raise RecipeError(f"line {line}: {keyword} names at most {MAX_COPY_SOURCES} sources")
    sources = tuple(_in_context(line, s) for s in words[:-1])
    if any("://" in s for s in words[:-1]):
        raise RecipeError(f"line {line}: {keyword} copies files of the context, not URLs")
    dest = posixpath.normpath(posixpath.join(state.workdir, words[-1]))
    if (words[-1].endswith("/") or len(sources) > 1) and dest != "/":
        dest += "/"
    return Copy(line, sources, dest, state.user)


def _in_context(line: int, source: str) -> str:
    path = posixpath.normpath(source.lstrip("/"))
    if path == ".." or path.startswith("../"):
        raise RecipeError(f"line {line}: {source!r} is outside the build context")
    return path


def _env_pairs(line: int, rest: str) -> dict[str, str]:
    words = shlex.split(rest)
    if words and "=" not in words[0]:
        if len(words) < 2:
            raise RecipeError(f"line {line}: ENV <name> <value> or ENV <name>=<value>")
        _check_name(line, words[0])
        return {words[0]: " ".join(words[1:])}
    pairs = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep:
            raise RecipeError(f"line {line}: ENV {word!r} has no '='")
        _check_name(line, name)
        pairs[name] = value
    return pairs


def _check_name(line: int, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise RecipeError(f"line {line}: {name!r} is not a variable name")


def _json_list(line: int, rest: str) -> list[str]:
    try:
        value = json.loads(rest)
    except json.JSONDecodeError as exc:
        raise RecipeError(f"line {line}: not a JSON list of strings: {exc}") from None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RecipeError(f"line {line}: not a JSON list of strings")
    return value


def _instructions(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, KEYWORD, the rest) per instruction, continuations joined."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        keyword, _, rest = " ".join(pending).strip().partition(" ")
        pending = []
        if not rest.strip():
            raise RecipeError(f"line {start}: {keyword} needs an argument")
        yield start, keyword.upper(), rest.strip()
    if pending:
        raise RecipeError(f"line {start}: the recipe ends inside a continued line")
