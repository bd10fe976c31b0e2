"""Recipes (the Dockerfile subset templates are built from), pure and bounded: `parse`
turns text into steps, `plan` checks them against a build context's paths, `worker`
runs both in a child process under CPU, memory and time limits (`check` is that
child). Both the API (a 422 at submission) and the node (before any VM) use them; the
package imports nothing else of SPACE."""
