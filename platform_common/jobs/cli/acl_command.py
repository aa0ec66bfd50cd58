"""`acl`: print the least-privilege Redis ACL rules of each role (platform_common.jobs.acl)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..acl import ROLES, markdown, rules
from ..keys import QUEUE_PREFIX, STORE_PREFIX

__all__ = ["acl"]


def _known_role(role: str | None) -> str | None:
    if role is not None and role not in ROLES:
        raise typer.BadParameter(f"{role!r} is not a role; one of {', '.join(ROLES)}")
    return role


def acl(
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            callback=_known_role,
            help=f"Only this role's rule tokens, on one line ({', '.join(ROLES)}).",
        ),
    ] = None,
    queue_prefix: Annotated[
        str, typer.Option("--queue-prefix", help="The queue's key prefix.")
    ] = QUEUE_PREFIX,
    store_prefix: Annotated[
        str, typer.Option("--store-prefix", help="The JobStore's key prefix.")
    ] = STORE_PREFIX,
) -> None:
    """Print the ACL rules of every role, as docs/operations.md shows them.

    With --role, only that role's tokens: ACL SETUSER <user> reset on ><password> <tokens>.
    """
    # Plain text, never rich: operators paste it into docs and redis-cli.
    if role is None:
        print(markdown(queue_prefix=queue_prefix, store_prefix=store_prefix), end="")
    else:
        print(" ".join(rules(role, queue_prefix=queue_prefix, store_prefix=store_prefix)))
