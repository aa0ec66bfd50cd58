"""`acl`: print the least-privilege Redis ACL rules of each role (platform_common.jobs.acl).

    agentjobs acl                                   every role, as docs/operations.md shows
    agentjobs acl --role worker --agent-types dining,flights --store-agents dining-agent
    agentjobs acl --role reader --agent-types dining      # a read-only console, info, ...
    printf %s "$PASSWORD" | agentjobs acl --role worker --agent-types dining --user w1

The last form prints a `users.acl` line holding the password's SHA-256, never the
password: it is read from stdin, so it appears in no command line, history or `ps`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from ..acl import ROLES, acl_file_line, markdown, rules
from ..keys import QUEUE_PREFIX, STORE_PREFIX
from ..validation import validate_name
from .exits import EXIT_USAGE, CliError

__all__ = ["acl"]


def _known_role(role: str | None) -> str | None:
    if role is not None and role not in ROLES:
        raise typer.BadParameter(f"{role!r} is not a role; one of {', '.join(ROLES)}")
    return role


def _names(option: str, value: str | None) -> list[str] | None:
    """The comma-separated names of `option` (None when not given), each a valid name:
    a glob character would widen the scope to other types, so none is accepted."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise CliError(f"{option}: give at least one name", EXIT_USAGE)
    return [validate_name(name, option) for name in names]


def _password_from_stdin() -> str:
    password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise CliError("--user: the password is read from stdin, and stdin gave none", EXIT_USAGE)
    return password


def acl(
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            callback=_known_role,
            help=f"Only this role's rule tokens, on one line ({', '.join(ROLES)}).",
        ),
    ] = None,
    agent_types: Annotated[
        str | None,
        typer.Option(
            "--agent-types",
            help="Comma-separated agent types a producer, worker, reader or operator is "
            "limited to (their queue keys and completion channels). Default: every type.",
        ),
    ] = None,
    store_agents: Annotated[
        str | None,
        typer.Option(
            "--store-agents",
            help="Comma-separated JobStore agents (OTEL_SERVICE_NAME) a producer or worker "
            "is limited to. Default: every agent.",
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="Print a users.acl line for this user instead; its password is read "
            "from stdin and stored as its SHA-256.",
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
    # The queue's rule for its prefix, as acl.rules applies it, named by the option here.
    validate_name(queue_prefix, "--queue-prefix")
    validate_name(store_prefix, "--store-prefix")
    types = _names("--agent-types", agent_types)
    agents = _names("--store-agents", store_agents)
    if role is None:
        given = [o for o, v in (("--agent-types", types), ("--store-agents", agents)) if v]
        if user is not None:
            given.append("--user")
        if given:
            raise CliError(f"{', '.join(given)} needs --role", EXIT_USAGE)
        # Plain text, never rich: operators paste it into docs and redis-cli.
        print(markdown(queue_prefix=queue_prefix, store_prefix=store_prefix), end="")
        return
    if not ROLES[role].scoped and (types or agents):
        raise CliError(
            f"the {role} role reads every agent type: --agent-types and --store-agents "
            "are for the other roles",
            EXIT_USAGE,
        )
    if not ROLES[role].uses_store and agents:
        raise CliError(
            f"the {role} role uses no JobStore: --store-agents is for producer and worker",
            EXIT_USAGE,
        )
    scope: dict[str, Any] = {
        "queue_prefix": queue_prefix,
        "store_prefix": store_prefix,
        "agent_types": types,
        "store_agents": agents,
    }
    if user is None:
        print(" ".join(rules(role, **scope)))
    else:
        print(acl_file_line(_username(user), _password_from_stdin(), role, **scope))


def _username(user: str) -> str:
    # A space would end the name inside the users.acl line; ACL names allow the rest.
    if not user or any(c.isspace() for c in user):
        raise CliError(f"--user: {user!r} must be one word", EXIT_USAGE)
    return user
