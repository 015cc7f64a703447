"""`det user login | logout | whoami | list | create | change-password |
activate | deactivate | edit`: users and the sessions the CLI keeps for them
(see _auth for the token cache and who a command acts as)."""

import argparse
from typing import Any

from determined.cli._client import CliError, Gateway, connect, master_address
from determined.cli._output import message_dict, print_json, print_table

USER_HEADERS = ["user_id", "username", "display_name", "admin", "active"]


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    user = commands.add_parser("user", aliases=["u"], help="users and logging in")
    verbs = user.add_subparsers(dest="verb", metavar="<verb>")
    user.set_defaults(run=lambda _args: user.print_help())

    login = verbs.add_parser("login", help="log in (asks for the password) and make the user the active one")
    login.add_argument("username", nargs="?", metavar="USERNAME", help="default: -u, else asked for")
    login.set_defaults(run=log_in)
    logout = verbs.add_parser("logout", help="end the active user's session")
    logout.add_argument(
        "-a", "--all", action="store_true", help="end every session this CLI keeps for the master"
    )
    logout.set_defaults(run=log_out)
    verbs.add_parser("whoami", help="the user commands act as").set_defaults(run=who_am_i)

    listing = verbs.add_parser("list", aliases=["ls"], help="the active users (--all: the deactivated too)")
    listing.add_argument("-a", "--all", action="store_true")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=list_users)

    create = verbs.add_parser("create", help="create a user (admin only)")
    create.add_argument("username", metavar="USERNAME")
    create.add_argument("--admin", action="store_true", help="an administrator")
    create.add_argument("--password", default=None, help="default: asked for twice")
    create.set_defaults(run=create_user)

    password = verbs.add_parser(
        "change-password", help="set a user's password (your own, or as admin anyone's)"
    )
    password.add_argument("target_user", nargs="?", metavar="USERNAME", help="default: the user you act as")
    password.set_defaults(run=change_password)

    for verb, active in (("activate", True), ("deactivate", False)):
        command = verbs.add_parser(verb, help=f"{verb} a user (admin only)")
        command.add_argument("username", metavar="USERNAME")
        command.set_defaults(run=set_active, active=active)

    edit = verbs.add_parser(
        "edit", help="change a user's name, display name, admin flag or whether it is active"
    )
    edit.add_argument("target_user", metavar="USERNAME")
    edit.add_argument("--display-name", default=None)
    edit.add_argument("--username", dest="new_username", default=None)
    edit.add_argument("--active", type=_boolean, default=None, metavar="true|false")
    edit.add_argument("--admin", type=_boolean, default=None, metavar="true|false")
    edit.set_defaults(run=edit_user)


def log_in(args: argparse.Namespace) -> int:
    from determined.cli._auth import TokenStore, read_password
    from determined.common.passwords import salted_hash

    username = args.username or args.user or input("Username: ").strip()
    if not username:
        raise CliError("no username given")
    gateway = Gateway(master_address(args.master))
    token = gateway.login(username, salted_hash(read_password(f"Password for user '{username}': ")))
    TokenStore(gateway.address).remember(username, token, active=True)
    return 0


def log_out(args: argparse.Namespace) -> int:
    from determined.cli._auth import TokenStore

    gateway = Gateway(master_address(args.master))
    store = TokenStore(gateway.address)
    users = store.users() if args.all else [user for user in [args.user or store.active_user()] if user]
    for user in users:
        token = store.token(user)
        if token is not None:
            _end_session(gateway, token)
        store.forget(user)
    return 0


def _end_session(gateway: Gateway, token: str) -> None:
    """Logout with `token`; a session the gateway no longer takes is over already."""
    from determined.cli._client import bearer
    from determined.proto import api_pb2

    try:
        gateway.call(gateway.bare_stub.Logout, api_pb2.LogoutRequest(), metadata=bearer(token))
    except CliError as refused:
        if refused.code != "UNAUTHENTICATED":
            raise


def who_am_i(args: argparse.Namespace) -> int:
    print(f"You are logged in as user '{_me(connect(args))['username']}'")
    return 0


def _me(gateway: Gateway) -> dict[str, Any]:
    from determined.proto import api_pb2

    return message_dict(gateway.call(gateway.stub.GetMe, api_pb2.GetMeRequest()).user)


def list_users(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    response = gateway.call(gateway.stub.GetUsers, api_pb2.GetUsersRequest(include_inactive=args.all))
    if args.json:
        print_json([message_dict(user) for user in response.users])
        return 0
    print_table(USER_HEADERS, [[u.id, u.username, u.display_name, u.admin, u.active] for u in response.users])
    return 0


def create_user(args: argparse.Namespace) -> int:
    from determined.common.passwords import salted_hash
    from determined.proto import api_pb2

    password = args.password if args.password is not None else _new_password(args.username)
    _warn_if_weak(password)
    gateway = connect(args)
    request = api_pb2.CreateUserRequest(
        username=args.username, admin=args.admin, password=salted_hash(password), is_hashed=True
    )
    gateway.call(gateway.stub.CreateUser, request)
    print(f"Created user '{args.username}'" + (" (admin)" if args.admin else ""))
    return 0


def change_password(args: argparse.Namespace) -> int:
    from determined.cli._auth import TokenStore
    from determined.common.passwords import salted_hash
    from determined.proto import api_pb2

    gateway = connect(args)
    me = str(_me(gateway)["username"])
    target = args.target_user or me
    password = _new_password(target)
    _warn_if_weak(password)
    hashed = salted_hash(password)
    request = api_pb2.SetUserPasswordRequest(username=target, password=hashed, is_hashed=True)
    gateway.call(gateway.stub.SetUserPassword, request)
    if target == me:  # the change ended every session of the user, this one too: log in again
        store = TokenStore(gateway.address)
        store.remember(me, gateway.login(me, hashed), active=store.active_user() == me)
    print(f"Password of user '{target}' changed")
    return 0


def set_active(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    _update(connect(args), api_pb2.UpdateUserRequest(username=args.username, active=args.active))
    return 0


def edit_user(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    changes = {
        "new_username": args.new_username,
        "display_name": args.display_name,
        "active": args.active,
        "admin": args.admin,
    }
    given = {field: value for field, value in changes.items() if value is not None}
    if not given:
        raise CliError("nothing to change: give --display-name, --username, --active or --admin")
    _update(connect(args), api_pb2.UpdateUserRequest(username=args.target_user, **given))
    return 0


def _update(gateway: Gateway, request: Any) -> None:
    response = gateway.call(gateway.stub.UpdateUser, request)
    if response.unchanged_reason:
        print(response.unchanged_reason)
        return
    user = response.user
    print(
        f"User '{user.username}': display name '{user.display_name}', "
        f"{'admin' if user.admin else 'not admin'}, {'active' if user.active else 'deactivated'}"
    )


def _new_password(username: str) -> str:
    """Asked for twice; CliError when the two differ."""
    from determined.cli._auth import read_password

    first = read_password(f"New password for user '{username}': ")
    if read_password("Confirm password: ") != first:
        raise CliError("the passwords do not match")
    return first


def _warn_if_weak(password: str) -> None:
    """Determined's advice: a password of 8 characters or more with upper- and
    lowercase letters and a digit. Only a warning: the choice is the user's."""
    import sys

    from determined.common.passwords import weaknesses

    problems = weaknesses(password)
    if problems:
        print(f"warning: the password is weak: it {', '.join(problems)}", file=sys.stderr)


def _boolean(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
