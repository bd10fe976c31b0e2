"""Process configuration, built once at startup from the environment (pydantic-settings).

`Settings` (`settings.py`) is everything one SPACE process needs, composed of one
sub-config per concern, each reading its own `SPACE_*` variables and living with the
others of the process that uses it: `server` (the API: listening, deadlines, request
bounds, output caps, the console, the ingress), `control` (the controller, the
database, the many-node cluster), `node` (the node worker, its seam over HTTP, the
recovery of its VMs, the VMM), `egress` (the gateway, the operator's egress limits),
`secrets` (node tokens and key files, API keys' tokens, the credential store),
`quotas` (per-org limits), `doctor`; `units` holds the byte units. Besides
`space.egress` (the policy the egress config is checked with) the package imports
nothing of SPACE (an import-linter contract), and nothing is instantiated at import time.
"""

from space.config.settings import Settings

__all__ = ["Settings"]
