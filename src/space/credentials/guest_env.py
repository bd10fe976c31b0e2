"""The environment variables a sandbox's processes get from its credential view.

One variable per credential in the view, named exactly after the credential and
holding the sandbox's placeholder for it, never the value. Credential names are
already `[A-Za-z_][A-Za-z0-9_]*` (the API refuses others), so each is a valid
variable name as it stands; a name that is not (a row written some other way)
gets no variable. With exactly one `aws_sigv4` credential in the view,
`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` both hold its placeholder too
(the guest signs with the placeholder as both, `space.credentials.sigv4`); with
several, neither is set, since any choice would be a guess. A `rules` entry (a
use of an E2B secret) gets no variable: the gateway sets its header itself.
"""

from __future__ import annotations

import re

from space.credentials.scopes import CredentialView

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
AWS_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def placeholder_env(view: CredentialView) -> dict[str, str]:
    """The variables for `view`'s entries (placeholders only)."""
    env = {
        e.name: e.placeholder
        for e in view.entries
        if e.kind != "rules" and ENV_NAME.fullmatch(e.name)
    }
    signing = [e for e in view.entries if e.kind == "aws_sigv4"]
    if len(signing) == 1:
        env.update(dict.fromkeys(AWS_NAMES, signing[0].placeholder))
    return env
