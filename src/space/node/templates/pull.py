"""Images from a registry: `docker://HOST[:PORT]/REPO[:TAG|@DIGEST]` pulled with
Debian's `skopeo` into an OCI layout, then imported like any layout (`imports.py`).

TLS is verified unless the registry's `HOST[:PORT]` is in `insecure` (a registry on
loopback in tests, or an operator's own plain-HTTP mirror). Signature policy: none
is required (the operator names the registry; what is imported is then checked
like any layout: every blob against its digest, sizes and counts bounded). A pull
is bounded in time; its layout lives under the cache's scratch and goes after.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from space.node.templates.errors import ImageError

PREFIX = "docker://"
PULL_SECONDS = 1800
_REFERENCE = re.compile(
    r"[a-z0-9.-]+(:[0-9]{1,5})?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})?"
)
_POLICY = {"default": [{"type": "insecureAcceptAnything"}]}


def is_registry(source: str) -> bool:
    return source.startswith(PREFIX)


def pull(source: str, layout: Path, insecure: Sequence[str] = ()) -> Path:
    """`source` copied into the OCI layout directory `layout` (ImageError if the
    reference is malformed or the pull fails); the layout's path."""
    reference = source.removeprefix(PREFIX)
    if not _REFERENCE.fullmatch(reference):
        raise ImageError(f"{source!r} is not docker://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]")
    host = reference.split("/", 1)[0]
    layout.mkdir(mode=0o700, parents=True)
    policy = layout.parent / f"{layout.name}.policy.json"
    policy.write_text(json.dumps(_POLICY))
    argv = [
        "skopeo", "copy", "--quiet", f"--policy={policy}",
        f"--src-tls-verify={'false' if host in insecure else 'true'}",
        source, f"oci:{layout}:image",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PULL_SECONDS)
    except FileNotFoundError:
        raise ImageError("pulling from a registry needs skopeo (apt-get install skopeo)") from None
    except subprocess.TimeoutExpired:
        raise ImageError(f"pulling {source} took more than {PULL_SECONDS} s") from None
    finally:
        policy.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ImageError(f"pulling {source} failed: {done.stderr.strip()[-500:]}")
    return layout
