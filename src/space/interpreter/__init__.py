"""The code interpreter that runs inside `code-interpreter` sandboxes (port 49999).

It runs on the template's own Python (Debian's python3 with ipykernel, numpy, pandas
and matplotlib), not the agent's runtime, and is shipped on the agent disk next to
the agent (`/run/space/py/space/interpreter`). Stdlib plus `jupyter_client`; nothing
here may import the host side. Entry point: `python3 -m space.interpreter`.
"""
