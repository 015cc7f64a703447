"""The pure rules of users and sessions: the directory's fold, passwords,
who may change what, and session tokens."""

import pytest

from determined.common.passwords import salted_hash
from determined.proto import events_pb2
from services.common.envelope import Append, wrap
from services.common.tokens import (
    InvalidTokenError,
    mint_allocation_token,
    mint_session_token,
    verify_allocation_token,
    verify_session_token,
)
from services.gateway import projection
from services.gateway.errors import InvalidArgumentError, PermissionDeniedError
from services.gateway.features.commands import Unchanged
from services.gateway.features.users import accounts as users


def folded(*appends: Append) -> users.Directory:
    directory = users.Directory()
    for sequence, append in enumerate(appends, start=1):
        directory.apply(sequence, wrap(append, actor="test", occurred_at_ns=sequence))
    return directory


def created(user_id: int, username: str, admin: bool = False, password_hash: str = "") -> Append:
    return users.user_created(
        user_id, username, display_name="", admin=admin, password_hash=password_hash, created_by="cluster"
    )


def edit(directory: users.Directory, actor: str, target: str, **changes: object) -> Append | Unchanged:
    fields: dict[str, object] = {"new_username": None, "display_name": None, "admin": None, "active": None}
    fields.update(changes)
    actor_user, target_user = directory.by_name(actor), directory.by_name(target)
    assert actor_user is not None and target_user is not None
    return users.user_updated(directory, actor_user, target_user, **fields)  # type: ignore[arg-type]


def test_session_tokens_verify_against_the_secret_and_are_no_allocation_tokens() -> None:
    token = mint_session_token("k", 3, "abc", 123)
    claims = verify_session_token("k", token)
    assert (claims.user_id, claims.session_id, claims.expires_at_ns) == (3, "abc", 123)
    for bad in ("", "x", token + "0", token.replace(":3:", ":4:"), mint_allocation_token("k", 3, "abc")):
        with pytest.raises(InvalidTokenError):
            verify_session_token("k", bad)
    with pytest.raises(InvalidTokenError):
        verify_session_token("other", token)
    with pytest.raises(InvalidTokenError):
        verify_allocation_token("k", token)


def test_passwords_are_kept_as_bcrypt_of_the_salted_hash() -> None:
    salted = salted_hash("s3cret")
    stored = users.hash_password(salted)
    assert stored.startswith("$2") and salted not in stored
    assert users.password_matches(stored, salted)
    assert not users.password_matches(stored, salted_hash("other"))
    assert not users.password_matches(stored, "")
    assert users.hash_password("") == ""
    assert users.password_matches("", "") and not users.password_matches("", salted)


def test_a_hashed_password_must_look_like_one() -> None:
    assert users.checked_salted_password(salted_hash("x")) == salted_hash("x")
    assert users.checked_salted_password("") == ""
    with pytest.raises(InvalidArgumentError):
        users.checked_salted_password("plain text")


def test_a_name_and_an_id_are_taken_once() -> None:
    directory = folded(created(1, "admin", admin=True), created(2, "admin"), created(1, "bob"))
    assert list(directory.users) == [1]
    assert directory.next_user_id() == 2
    assert users.user_created(
        3, "ann", display_name="", admin=False, password_hash="", created_by="x"
    ).msg_id == ("user-created-ann")
    with pytest.raises(InvalidArgumentError):
        created(3, "no spaces")


def test_folding_an_event_twice_changes_nothing() -> None:
    directory = folded(created(1, "admin", admin=True), users.session_started(1, "s", 10))
    before = (dict(directory.users), dict(directory.sessions))
    directory.apply(
        2, wrap(users.session_revoked(1, "s"), actor="t", occurred_at_ns=0)
    )  # at or below: skipped
    assert (dict(directory.users), dict(directory.sessions)) == before


def test_user_administration_is_an_admins() -> None:
    directory = folded(created(1, "admin", admin=True), created(3, "ann"), created(4, "bob"))
    for changes in ({"active": False}, {"admin": True}, {"new_username": "x"}, {"display_name": "Bob"}):
        with pytest.raises(PermissionDeniedError, match="needs an admin; ann is not one"):
            edit(directory, "ann", "bob", **changes)
    own = edit(directory, "ann", "ann", display_name="Ann")
    assert isinstance(own, Append) and own.payload == events_pb2.UserUpdated(user_id=3, display_name="Ann")
    assert own.msg_id == f"user-updated-3-{directory.users[3].version}"
    deactivated = edit(directory, "admin", "bob", active=False, admin=False)
    assert isinstance(deactivated, Append) and deactivated.payload == events_pb2.UserUpdated(
        user_id=4, active=False
    )
    assert isinstance(edit(directory, "admin", "bob", active=True), Unchanged)


def test_an_admin_cannot_lock_themselves_out_nor_take_a_taken_name() -> None:
    directory = folded(created(1, "admin", admin=True), created(3, "ann"))
    with pytest.raises(InvalidArgumentError):
        edit(directory, "admin", "admin", active=False)
    with pytest.raises(InvalidArgumentError):
        edit(directory, "admin", "admin", admin=False)
    with pytest.raises(InvalidArgumentError, match="taken"):
        edit(directory, "admin", "ann", new_username="admin")


def test_a_rename_moves_the_name() -> None:
    directory = folded(created(1, "admin", admin=True), created(3, "ann"))
    renamed = edit(directory, "admin", "ann", new_username="anne")
    assert isinstance(renamed, Append)
    directory.apply(3, wrap(renamed, actor="t", occurred_at_ns=3))
    assert directory.by_name("ann") is None and directory.by_name("anne") == directory.users[3]


def test_a_failed_login_moves_the_version_an_edit_is_decided_against() -> None:
    directory = folded(created(1, "admin", admin=True), created(3, "ann"))
    failed, actor = users.login_failed(directory.users[3], "10.0.0.7", "wrong password", now_ns=0)
    assert actor == "address:10.0.0.7"
    directory.apply(3, wrap(failed, actor=actor, occurred_at_ns=3))
    assert directory.users[3].version == 3
    deactivated = edit(directory, "admin", "ann", active=False)
    assert isinstance(deactivated, Append) and deactivated.expected_version == 3


def test_a_password_is_its_users_own_or_an_admins() -> None:
    directory = folded(created(1, "admin", admin=True), created(3, "ann"), created(4, "bob"))
    ann, bob, admin = directory.users[3], directory.users[4], directory.users[1]
    assert users.password_changed(ann, ann, "h").msg_id == f"user-password-3-{ann.version}"
    assert users.password_changed(admin, bob, "h").expected_version == bob.version
    with pytest.raises(PermissionDeniedError):
        users.password_changed(ann, bob, "h")


def test_sessions_end_with_logout_expiry_deactivation_or_a_new_password() -> None:
    directory = folded(
        created(3, "ann"), users.session_started(3, "a", 100), users.session_started(3, "b", 100)
    )
    assert directory.session_user(3, "a", 100, now_ns=99).username == "ann"
    with pytest.raises(users.SessionRefusedError, match="expired"):
        directory.session_user(3, "a", 100, now_ns=100)
    with pytest.raises(users.SessionRefusedError, match="unknown"):
        directory.session_user(4, "a", 100, now_ns=0)
    directory.apply(4, wrap(users.session_revoked(3, "a"), actor="t", occurred_at_ns=4))
    with pytest.raises(users.SessionRefusedError, match="ended"):
        directory.session_user(3, "a", 100, now_ns=0)
    changed = events_pb2.UserPasswordChanged(user_id=3, password_hash="x")
    directory.apply(5, wrap(Append("user/3", changed, "p"), actor="t", occurred_at_ns=5))
    with pytest.raises(users.SessionRefusedError, match="password"):
        directory.session_user(3, "b", 100, now_ns=0)
    directory.forget_expired(now_ns=100)
    assert directory.sessions == {}


def test_the_read_models_rows_of_users_and_sessions_hold_no_password() -> None:
    events = [
        wrap(append, actor="t", occurred_at_ns=at)
        for at, append in enumerate(
            [
                created(3, "ann", password_hash="$2b$secret"),
                users.session_started(3, "s", 99),
                Append("user/3", events_pb2.UserUpdated(user_id=3, display_name="Ann", active=False), "u"),
                Append("user/3", events_pb2.UserPasswordChanged(user_id=3, password_hash="$2b$new"), "p"),
                users.session_revoked(3, "s"),
            ],
            start=1,
        )
    ]
    rows = projection.plan_batch(events).rows({})
    assert rows["users"] == [
        {
            "user_id": 3,
            "username": "ann",
            "display_name": "Ann",
            "admin": False,
            "active": False,
            "created_at_ns": 1,
            "created_by": "cluster",
            "password_changed_at_ns": 4,
        }
    ]
    assert rows["user_sessions"] == [
        {"session_id": "s", "user_id": 3, "started_at_ns": 2, "expires_at_ns": 99, "ended_at_ns": 5}
    ]
    assert projection.plan_batch(events + events).rows({}) == rows  # a replayed log leaves the same rows
