"""Determined 0.38's SDK members this cluster has no counterpart for (workspaces, projects,
OAuth clients, Pachyderm, ...). They exist under their names, so that importing them works
and a script fails only where it uses one, with an error naming the member."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn


class UnsupportedError(NotImplementedError):
    """A Determined 0.38 SDK member this cluster does not offer."""


def refuse(member: str, why: str) -> NoReturn:
    raise UnsupportedError(f"{member} is not supported by this cluster: {why}")


def unsupported_method(member: str, why: str) -> Callable[..., Any]:
    """A method that raises UnsupportedError when called."""

    def method(*_args: Any, **_kwargs: Any) -> NoReturn:
        refuse(member, why)

    method.__name__ = member.rsplit(".", 1)[-1]
    method.__doc__ = f"Not supported by this cluster: {why}."
    return method


def unsupported_class(name: str, why: str) -> type:
    """A class that raises UnsupportedError when made."""

    def init(_self: Any, *_args: Any, **_kwargs: Any) -> None:
        refuse(name, why)

    return type(name, (), {"__init__": init, "__doc__": f"Not supported by this cluster: {why}."})


NO_WORKSPACES = "it has no workspaces or projects (every experiment and model is in one place)"
NO_OAUTH = "it has no OAuth or SCIM clients"
NO_PACHYDERM = "it has no Pachyderm integration"
NO_RESOURCE_POOL_API = "its resource pools are listed by `det master info` and `det agent list`"
