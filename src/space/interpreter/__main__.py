"""`python3 -m space.interpreter [PORT]`: serve the code interpreter."""

from __future__ import annotations

import sys

from space.interpreter.server import PORT, serve

if __name__ == "__main__":
    serve(port=int(sys.argv[1]) if len(sys.argv) > 1 else PORT)
