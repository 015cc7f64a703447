"""Users in the SDK: who is logged in, and the admin's user management."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from determined.experimental._unsupported import refuse

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.proto import api_pb2


class User:
    """One user, as the master knew it when it was fetched (`reload()` fetches it again)."""

    def __init__(self, gateway: Gateway, message: api_pb2.User) -> None:
        self._gateway = gateway
        self._message = message

    def __repr__(self) -> str:
        return f"User(username={self.username!r})"

    @property
    def user_id(self) -> int:
        return self._message.id

    @property
    def username(self) -> str:
        return self._message.username

    @property
    def display_name(self) -> str:
        return self._message.display_name

    @property
    def admin(self) -> bool:
        return self._message.admin

    @property
    def active(self) -> bool:
        return self._message.active

    @property
    def remote(self) -> bool:
        """Always False: every user here logs in with a password."""
        return False

    def reload(self) -> None:
        self._message = user_by_name(self._gateway, self.username)._message

    def activate(self) -> None:
        self._update(active=True)

    def deactivate(self) -> None:
        self._update(active=False)

    def change_display_name(self, display_name: str) -> None:
        self._update(display_name=display_name)

    def rename(self, new_username: str) -> None:
        self._update(new_username=new_username)
        self._message.username = new_username

    def change_password(self, new_password: str) -> None:
        from determined.common.passwords import salted_hash
        from determined.proto import api_pb2

        request = api_pb2.SetUserPasswordRequest(
            username=self.username, password=salted_hash(new_password), is_hashed=True
        )
        self._gateway.call(self._gateway.stub.SetUserPassword, request)

    def link_with_agent(self, *_args: Any, **_kwargs: Any) -> None:
        refuse("User.link_with_agent", "trials run as the agent's own user")

    def _update(self, **fields: Any) -> None:
        from determined.proto import api_pb2

        request = api_pb2.UpdateUserRequest(username=self.username, **fields)
        self._gateway.call(self._gateway.stub.UpdateUser, request)
        self.reload()


def list_users(gateway: Gateway, active: bool | None = None) -> list[User]:
    """Every user; with `active`, only the active (True) or deactivated (False) ones."""
    from determined.proto import api_pb2

    response: api_pb2.GetUsersResponse = gateway.call(
        gateway.stub.GetUsers, api_pb2.GetUsersRequest(include_inactive=active is not True)
    )
    return [User(gateway, u) for u in response.users if active is None or u.active == active]


def user_by_name(gateway: Gateway, username: str) -> User:
    from determined.cli._client import CliError

    found = [u for u in list_users(gateway) if u.username == username]
    if not found:
        raise CliError(f"user {username!r} not found", "NOT_FOUND")
    return found[0]


def user_by_id(gateway: Gateway, user_id: int) -> User:
    from determined.cli._client import CliError

    found = [u for u in list_users(gateway) if u.user_id == user_id]
    if not found:
        raise CliError(f"user {user_id} not found", "NOT_FOUND")
    return found[0]


def whoami(gateway: Gateway) -> User:
    from determined.proto import api_pb2

    response: api_pb2.GetMeResponse = gateway.call(gateway.stub.GetMe, api_pb2.GetMeRequest())
    return User(gateway, response.user)


def create_user(gateway: Gateway, username: str, admin: bool, password: str | None) -> User:
    """A new user; ValueError when the password is missing or too weak (Determined's rules)."""
    from determined.common.passwords import salted_hash
    from determined.proto import api_pb2

    check_password(password)
    assert password is not None
    request = api_pb2.CreateUserRequest(
        username=username, admin=admin, password=salted_hash(password), is_hashed=True
    )
    gateway.call(gateway.stub.CreateUser, request)
    return user_by_name(gateway, username)


def check_password(password: str | None) -> None:
    """ValueError unless the password follows Determined 0.38's create_user rules."""
    from determined.common.passwords import weaknesses

    if password is None:
        raise ValueError("a password is required: every user here logs in with one")
    problems = weaknesses(password)
    if problems:
        raise ValueError(f"the password is too weak: it {', '.join(problems)}")
