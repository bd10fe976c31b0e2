"""The node seam: how the control plane (`space.api`, `space.control`) talks to a node.

`values` holds the frozen dataclasses that cross it, `protocol` the `NodeClient`
interface and the handles it returns, `errors` what a node raises across it.
`space.node.local.LocalNode` serves it in-process for one host; an HTTP client can
serve it unchanged for many. This package imports nothing else of `space`
(an import-linter contract holds it to that), so both sides depend on it and it
depends on neither.
"""
