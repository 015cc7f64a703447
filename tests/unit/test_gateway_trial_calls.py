"""What an allocation token is good for (auth.TRIAL_RPCS): the calls a trial
process makes, and nothing else, whoever's trial it is. The walk over every
RPC and route against a real gateway is tests/security/test_allocation_tokens.py."""

import re
from pathlib import Path

import pytest
from test_gateway_auth import SECRET, Directory, directory  # noqa: F401 (a fixture)

from determined.proto import api_pb2
from services.common.tokens import mint_allocation_token
from services.gateway import auth
from services.gateway.errors import PermissionDeniedError, UnauthenticatedError

TRIAL_CLIENT = Path(__file__).parents[2] / "harness" / "determined" / "_client.py"
SERVICE = api_pb2.DESCRIPTOR.services_by_name["Determined"]


def test_the_allow_list_names_rpcs_of_the_service_and_no_public_one() -> None:
    assert set(SERVICE.methods_by_name) >= auth.TRIAL_RPCS
    assert not auth.TRIAL_RPCS & auth.PUBLIC_RPCS


# What the trial client calls only for a detached run's script (core_v2), with its user's
# login: never with an allocation token.
DETACHED_RUN_RPCS = {"StartUnmanagedTrial", "ReportUnmanagedTrial"}


def test_the_allow_list_is_what_the_trial_client_calls() -> None:
    called = set(re.findall(r"self\._stub\.(\w+)", TRIAL_CLIENT.read_text()))
    assert called == auth.TRIAL_RPCS | DETACHED_RUN_RPCS
    assert not auth.TRIAL_RPCS & DETACHED_RUN_RPCS


@pytest.mark.parametrize("rpc", sorted(SERVICE.methods_by_name))
def test_an_allocation_token_is_good_for_the_trial_calls_only(rpc: str) -> None:
    trial = auth.TrialPrincipal(9, "9.1")
    if rpc in auth.TRIAL_RPCS:
        auth.check_trial_call(rpc, trial)
    else:
        with pytest.raises(PermissionDeniedError, match=f"allocation token .*trial 9.* not for {rpc};"):
            auth.check_trial_call(rpc, trial)


async def test_a_public_rpc_is_refused_to_an_allocation_token(directory: Directory) -> None:  # noqa: F811
    caller = auth._Caller(
        auth.Authenticator(SECRET, directory),
        {auth.ALLOCATION_TOKEN: mint_allocation_token(SECRET, 9, "9.1")},
        "GetMaster",
    )
    with pytest.raises(PermissionDeniedError, match="not for GetMaster"):
        await caller.enter()
    await auth._Caller(auth.Authenticator(SECRET, directory), {}, "GetMaster").enter()  # without: open


async def test_an_allocation_token_is_no_bearer_token(directory: Directory) -> None:  # noqa: F811
    bearer = {"authorization": f"Bearer {mint_allocation_token(SECRET, 9, '9.1')}"}
    with pytest.raises(UnauthenticatedError, match="an allocation token is not a user's session token"):
        await auth.Authenticator(SECRET, directory).authenticate(bearer)
