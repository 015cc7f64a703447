"""Who a call is: a trial with a verified allocation token, a user with a good
session token, nobody (UNAUTHENTICATED) without one unless anonymous calls
are allowed. The directory is filled by folding events, as the gateway's is."""

import time

import pytest

from services.common.envelope import Append, wrap
from services.common.tokens import mint_allocation_token, mint_session_token
from services.gateway import auth
from services.gateway.errors import PermissionDeniedError, UnauthenticatedError
from services.gateway.features.commands import Unchanged
from services.gateway.features.users import accounts as users
from services.gateway.features.users.directory import UserDirectory

SECRET = "s"
HOUR_NS = 3600 * 10**9


class Directory(UserDirectory):
    """A directory folded from given events, that never needs to catch up with a log."""

    def __init__(self) -> None:
        self.current = users.Directory()
        self.sequence = 0

    def append(self, append: Append) -> None:
        self.sequence += 1
        self.current.apply(self.sequence, wrap(append, actor="test", occurred_at_ns=self.sequence))

    async def catch_up(self, timeout_s: float = 10.0) -> bool:
        return True


@pytest.fixture
def directory() -> Directory:
    created = Directory()
    for user_id, username, admin in users.BUILT_IN_USERS:
        created.append(
            users.user_created(
                user_id, username, display_name="", admin=admin, password_hash="", created_by="cluster"
            )
        )
    return created


def login(
    directory: Directory, user_id: int, session_id: str = "s1", expires_at_ns: int = 0
) -> dict[str, str]:
    expires_at_ns = expires_at_ns or time.time_ns() + HOUR_NS
    directory.append(users.session_started(user_id, session_id, expires_at_ns))
    return {"authorization": f"Bearer {mint_session_token(SECRET, user_id, session_id, expires_at_ns)}"}


async def test_a_session_token_names_its_user(directory: Directory) -> None:
    principal = await auth.Authenticator(SECRET, directory).authenticate(login(directory, 1))
    assert principal == auth.UserPrincipal("admin", 1, True, "s1")
    assert principal.actor == "user:admin"


async def test_no_token_is_not_logged_in_unless_anonymous_calls_are_allowed(directory: Directory) -> None:
    with pytest.raises(UnauthenticatedError, match="det user login"):
        await auth.Authenticator(SECRET, directory).authenticate({})
    anonymous = await auth.Authenticator(SECRET, directory, allow_anonymous=True).authenticate({})
    assert anonymous == auth.UserPrincipal("determined", 2, False, "")


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer x",
        "Basic abc",
        "Bearer " + mint_session_token("other secret", 1, "s1", time.time_ns() + HOUR_NS),
        "Bearer " + mint_allocation_token(SECRET, 1, "1.1"),
    ],
)
async def test_a_bad_token_is_refused_even_where_anonymous_calls_are_allowed(
    directory: Directory, authorization: str
) -> None:
    login(directory, 1)
    with pytest.raises(UnauthenticatedError, match="det user login"):
        await auth.Authenticator(SECRET, directory, allow_anonymous=True).authenticate(
            {"authorization": authorization}
        )


async def test_a_session_ends_with_logout_expiry_deactivation_or_a_new_password(directory: Directory) -> None:
    authenticator = auth.Authenticator(SECRET, directory)
    logged_out = login(directory, 2, "a")
    directory.append(users.session_revoked(2, "a"))
    with pytest.raises(UnauthenticatedError, match="ended"):
        await authenticator.authenticate(logged_out)
    with pytest.raises(UnauthenticatedError, match="expired"):
        await authenticator.authenticate(login(directory, 2, "b", expires_at_ns=time.time_ns() - 1))
    before_password = login(directory, 2, "c")
    admin, determined = directory.current.users[1], directory.current.users[2]
    directory.append(users.password_changed(admin, determined, "new hash"))
    with pytest.raises(UnauthenticatedError, match="password was changed"):
        await authenticator.authenticate(before_password)
    after_password = login(directory, 2, "d")
    assert (await authenticator.authenticate(after_password)).username == "determined"
    determined = directory.current.users[2]
    deactivated = users.user_updated(
        directory.current, admin, determined, new_username=None, display_name=None, admin=None, active=False
    )
    assert not isinstance(deactivated, Unchanged)
    directory.append(deactivated)
    with pytest.raises(UnauthenticatedError, match="not active"):
        await authenticator.authenticate(after_password)
    reactivated = users.user_updated(
        directory.current,
        admin,
        directory.current.users[2],
        new_username=None,
        display_name=None,
        admin=None,
        active=True,
    )
    assert not isinstance(reactivated, Unchanged)
    directory.append(reactivated)
    with pytest.raises(UnauthenticatedError, match="deactivated since the login"):
        await authenticator.authenticate(after_password)


async def test_a_token_of_another_users_session_is_refused(directory: Directory) -> None:
    login(directory, 2, "mine")
    expires = time.time_ns() + HOUR_NS
    forged = {"authorization": f"Bearer {mint_session_token(SECRET, 1, 'mine', expires)}"}
    with pytest.raises(UnauthenticatedError, match="unknown"):
        await auth.Authenticator(SECRET, directory).authenticate(forged)


async def test_allocation_tokens_verify_against_the_secret(directory: Directory) -> None:
    token = mint_allocation_token(SECRET, 4, "4.1")
    assert await auth.Authenticator(SECRET, directory).authenticate({auth.ALLOCATION_TOKEN: token}) == (
        auth.TrialPrincipal(4, "4.1")
    )
    with pytest.raises(UnauthenticatedError):
        await auth.Authenticator("other", directory).authenticate({auth.ALLOCATION_TOKEN: token})


def test_admin_rights() -> None:
    with auth.acting_as(auth.UserPrincipal("admin", 1, True)):
        assert auth.require_admin("disabling an agent").username == "admin"
    with (
        auth.acting_as(auth.UserPrincipal("ann", 3)),
        pytest.raises(PermissionDeniedError, match="needs an admin"),
    ):
        auth.require_admin("disabling an agent")
    with auth.acting_as(auth.TrialPrincipal(4, "4.1")), pytest.raises(PermissionDeniedError):
        auth.require_admin("disabling an agent")


def test_a_trial_reports_for_itself_only() -> None:
    with auth.acting_as(auth.TrialPrincipal(4, "4.1")):
        assert auth.require_trial(4).trial_id == 4
        with pytest.raises(PermissionDeniedError):
            auth.require_trial(5)
    with auth.acting_as(auth.UserPrincipal("determined")), pytest.raises(PermissionDeniedError):
        auth.require_trial(4)


def test_a_trial_process_watches_its_own_allocation_only() -> None:
    with auth.acting_as(auth.TrialPrincipal(4, "4.2")):
        assert auth.require_allocation("4.2").allocation_id == "4.2"
        with pytest.raises(PermissionDeniedError, match="not 4.1"):
            auth.require_allocation("4.1")
    with auth.acting_as(auth.UserPrincipal("determined")), pytest.raises(PermissionDeniedError):
        auth.require_allocation("4.2")
