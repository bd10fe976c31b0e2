"""The recipe checker's child process (`python -m space.recipes.check`), started by
`space.recipes.worker`: it first limits itself (address space, CPU seconds, no core
file, 16 descriptors), then reads one JSON request from stdin,
`{"recipe", "args", "context": {path: size}}`, and writes one JSON answer to stdout,
`{"base": "<its FROM template>"}` or `{"error": "line N: ..."}`. The limits come
before any byte of the tenant's input is read, so the worst recipe costs at most them."""

from __future__ import annotations

import json
import resource
import sys

from space.recipes.parse import RecipeError
from space.recipes.plan import plan

#: What the child may use: its address space, CPU seconds, and stdin bytes.
MEMORY_BYTES = 512 << 20
CPU_SECONDS = 5
MAX_INPUT = 2 << 20  # a recipe (1 MiB at most) and its context's paths


def limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))


def answer(raw: bytes) -> dict[str, object]:
    if len(raw) > MAX_INPUT:
        return {"error": f"a recipe and its context's paths are at most {MAX_INPUT >> 20} MiB"}
    request = json.loads(raw)
    context = {str(path): int(size) for path, size in request["context"].items()}
    try:
        recipe = plan(str(request["recipe"]), dict(request["args"]), context)
    except RecipeError as exc:
        return {"error": str(exc)}
    return {"base": recipe.base}


def main() -> None:
    limit()
    raw = sys.stdin.buffer.read(MAX_INPUT + 1)
    sys.stdout.write(json.dumps(answer(raw)))


if __name__ == "__main__":
    main()
