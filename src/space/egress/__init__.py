"""The egress policy as data, pure and without I/O: `names` (what a host name in SNI,
Host, `:authority`, a DNS question or a policy entry means), `ceiling` (the
operator's node-wide deny set), `policy` (a tenant's policy and `decide`, the one
decision function), `orgs` (the operator's per-org defaults and ceilings). The
configuration validates with it and the gateway enforces it; the package imports
nothing else of SPACE."""
