"""Create latency from a recipe template next to `base`'s, in the same run.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.recipe [--rounds 10]

One `space up` (SQLite, throw-away data dir, a private template cache, no warm
pool) builds a template through `POST /v1/templates`: a recipe with COPY, RUN and
ENV, a `start_cmd` HTTP server and a `ready_cmd` that fetches from it. Creates are
timed from `POST /v1/sandboxes` to its `201` for `base` and for the template,
alternately, after one create of each has built their base snapshots; the first exec
of every template sandbox asks its server (it must answer without being started).
The goal (issue 12): the template's p50 within 20 % of base's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx
from tests.e2e.server import SpaceServer
from tests.templates.busybox_image import private_cache

from bench.stats import emit, percentile, summary, value

RECIPE = """\
FROM base
ENV GREETING=hello
WORKDIR /srv
COPY index.html ./
RUN echo built > /srv/built.txt
"""
NAME = "bench-recipe"
BUILD: dict[str, object] = {
    "name": NAME,
    "dockerfile": RECIPE,
    "context": {"index.html": "PGgxPmJlbmNoPC9oMT4K"},
    "start_cmd": "cd /srv && exec python3 -m http.server 8000 --bind 127.0.0.1",
    "ready_cmd": "curl -sf http://127.0.0.1:8000/index.html",
}
SERVED = "<h1>bench</h1>\n"
BUILD_SECONDS = 900


def _create(http: httpx.Client, template: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = http.post("/v1/sandboxes", json={"template": template})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, str(response.json()["id"])


def _built(http: httpx.Client) -> None:
    response = http.post("/v1/templates", json=BUILD)
    response.raise_for_status()
    build = f"/v1/templates/builds/{response.json()['build_id']}"
    deadline = time.monotonic() + BUILD_SECONDS
    while (state := http.get(build).json())["state"] not in ("ready", "failed"):
        if time.monotonic() > deadline:
            raise RuntimeError("the recipe build did not finish")
        time.sleep(1)
    if state["state"] != "ready":
        raise RuntimeError(f"the recipe build failed: {state.get('error')}")


def main(rounds: int) -> None:
    emit(f"create from a recipe template vs base (accel {os.environ.get('SPACE_ACCEL', 'tcg')})")
    root = Path(tempfile.mkdtemp(prefix="space-bench-recipe-"))
    cache = private_cache(root / "cache")
    (root / "server").mkdir()
    server = SpaceServer(root / "server", SPACE_NODE_WARM_POOL="{}", SPACE_CACHE_DIR=str(cache))
    try:
        server.start()
        with server.client(timeout=600) as http:
            started = time.perf_counter()
            _built(http)
            value("recipe build (COPY, RUN, ENV, start and ready commands)",
                  time.perf_counter() - started, "s")  # fmt: skip
            samples: dict[str, list[float]] = {"base": [], NAME: []}
            for n in range(rounds + 1):
                for template in samples:
                    elapsed, sandbox = _create(http, template)
                    if template != "base":
                        ran = http.post(
                            f"/v1/sandboxes/{sandbox}/exec",
                            json={"cmd": "curl -s http://127.0.0.1:8000/index.html"},
                        )
                        if ran.json()["stdout"] != SERVED:
                            raise RuntimeError(f"the start command did not serve: {ran.text}")
                    if n:  # the first of each built its base snapshot
                        samples[template].append(elapsed)
                    http.delete(f"/v1/sandboxes/{sandbox}").raise_for_status()
            emit(summary("floor: create from base (restore)", samples["base"]))
            emit(summary("create from the recipe template (restore)", samples[NAME]))
            ratio = percentile(samples[NAME], 50) / percentile(samples["base"], 50)
            value("  recipe p50 / base p50 (goal <= 1.2)", ratio, "x")
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10, help="creates timed per template")
    main(parser.parse_args().rounds)
