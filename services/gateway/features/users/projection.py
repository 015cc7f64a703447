"""How events change the rows of users and their logins (pure; see plan.py
and projection.py for the fold)."""

from determined.proto import events_pb2
from services.gateway.features.feature import Feature
from services.gateway.features.users.tables import user_sessions, users
from services.gateway.plan import Plan, created, first, updated


def _user_created(plan: Plan, payload: events_pb2.UserCreated, at: int) -> None:
    row = {
        "user_id": payload.user_id,
        "username": payload.username,
        "display_name": payload.display_name,
        "admin": payload.admin,
        "active": payload.active,
        "created_at_ns": at,
        "created_by": payload.created_by,
        "password_changed_at_ns": at,
    }
    plan.change("users", payload.user_id, created(row))


def _user_updated(plan: Plan, payload: events_pb2.UserUpdated, at: int) -> None:
    """The fields the event holds (a rename to a taken name is never appended)."""
    changes = {
        name: getattr(payload, name)
        for name in ("username", "display_name", "admin", "active")
        if payload.HasField(name)
    }
    plan.change("users", payload.user_id, updated(**changes))


def _user_password_changed(plan: Plan, payload: events_pb2.UserPasswordChanged, at: int) -> None:
    plan.change("users", payload.user_id, updated(password_changed_at_ns=at))


def _user_session_started(plan: Plan, payload: events_pb2.UserSessionStarted, at: int) -> None:
    row = {
        "session_id": payload.session_id,
        "user_id": payload.user_id,
        "started_at_ns": at,
        "expires_at_ns": payload.expires_at_ns,
        "ended_at_ns": None,
    }
    plan.change("user_sessions", payload.session_id, created(row))


def _user_session_revoked(plan: Plan, payload: events_pb2.UserSessionRevoked, at: int) -> None:
    plan.change("user_sessions", payload.session_id, first(ended_at_ns=at))


FEATURE = Feature(
    "users",
    row_tables=(users, user_sessions),
    rules={
        "user_created": _user_created,
        "user_updated": _user_updated,
        "user_password_changed": _user_password_changed,
        "user_session_started": _user_session_started,
        "user_session_revoked": _user_session_revoked,
    },
)
