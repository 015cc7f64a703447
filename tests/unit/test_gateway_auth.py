"""Who a call is: user by default, a trial with a verified allocation token."""

import pytest

from services.common.tokens import mint_allocation_token
from services.gateway import auth
from services.gateway.errors import PermissionDeniedError, UnauthenticatedError


def test_calls_without_a_token_are_the_default_user() -> None:
    assert auth.authenticate({}, "s") == auth.UserPrincipal("determined")
    assert auth.authenticate({"authorization": "Bearer x"}, "s").actor == "user:determined"


def test_allocation_tokens_verify_against_the_secret() -> None:
    token = mint_allocation_token("s", 4, "4.1")
    assert auth.authenticate({auth.ALLOCATION_TOKEN: token}, "s") == auth.TrialPrincipal(4, "4.1")
    with pytest.raises(UnauthenticatedError):
        auth.authenticate({auth.ALLOCATION_TOKEN: token}, "other")


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
