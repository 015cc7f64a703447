"""Finding 6 of issue 17: what destroys an experiment's data (deleting its
checkpoints, setting a GC policy, deleting it) is its owner's or an admin's.
Pausing or killing someone's experiment stays open to every user
(Determined's basic mode). Against a real gateway, nats-server and PostgreSQL,
as the non-admin mallory against the admin's experiment."""

import grpc
from integration.test_gateway import CONFIG, given_trial, stored
from support import security_gateway
from support.security_gateway import SECRET, Metadata, logged_in, mallory, refused

from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway

# The module's fixtures: a real gateway and clients of it (tests/support/security_gateway.py).
gateway = security_gateway.gateway


async def experiment_with_checkpoints(
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    store: EventStore,
    owner: Metadata,
    trial_id: int,
    *uuids: str,
) -> int:
    """An experiment of `owner` whose trial `trial_id` reported checkpoints `uuids`."""
    created = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=CONFIG, context_tgz=b"tgz", activate=True), metadata=owner
    )
    await given_trial(store, gateway, trial_id=trial_id, experiment_id=created.experiment_id)
    token = (("x-allocation-token", mint_allocation_token(SECRET, trial_id, f"{trial_id}.1")),)
    for steps, uuid in enumerate(uuids, 1):
        request = api_pb2.ReportCheckpointRequest(
            uuid=uuid,
            trial_id=trial_id,
            allocation_id=f"{trial_id}.1",
            steps_completed=steps,
            resources={"model.pt": 3},
        )
        await api.ReportCheckpoint(request, metadata=token)
    assert await gateway.projector.catch_up()
    return created.experiment_id


def gc_policy(experiment_id: int) -> api_pb2.SetGcPolicyRequest:
    """`det e set gc-policy <experiment> 0 0 0`: keep none."""
    return api_pb2.SetGcPolicyRequest(
        experiment_id=experiment_id, save_experiment_best=0, save_trial_best=0, save_trial_latest=0
    )


async def deletions(store: EventStore) -> list[tuple[int, list[str], str]]:
    return [
        (
            e.checkpoint_delete_asked.experiment_id,
            list(e.checkpoint_delete_asked.uuids),
            e.checkpoint_delete_asked.asked_by,
        )
        for e in await stored(store, "experiment")
        if e.HasField("checkpoint_delete_asked")
    ]


async def test_mallory_cannot_delete_the_admins_checkpoints(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    admin = await logged_in(api)
    theirs = await experiment_with_checkpoints(api, gateway, event_store, admin, 1, "a-1", "a-2")
    her = await mallory(api, admin)
    hers = await experiment_with_checkpoints(api, gateway, event_store, her, 2, "m-1")
    before = await event_store.last_sequence()

    denied = await refused(
        api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["a-1"]), metadata=her)
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert denied.details() == (
        f"experiment {theirs} belongs to admin: only its owner or an admin may delete its checkpoints (a-1),"
        " and mallory is neither"
    )
    mixed = api_pb2.DeleteCheckpointsRequest(uuids=["m-1", "a-1", "a-2"])
    assert (
        await refused(api.DeleteCheckpoints(mixed, metadata=her))
    ).code() == grpc.StatusCode.PERMISSION_DENIED
    denied = await refused(api.SetGcPolicy(gc_policy(theirs), metadata=her))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "only its owner or an admin may set its GC policy, and mallory is neither" in (
        denied.details() or ""
    )
    denied = await refused(
        api.DeleteExperiment(api_pb2.DeleteExperimentRequest(experiment_id=theirs), metadata=her)
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED

    assert await event_store.last_sequence() == before  # nothing asked, nothing deleted
    listed = await api.GetExperimentCheckpoints(
        api_pb2.GetExperimentCheckpointsRequest(experiment_id=theirs), metadata=her
    )
    assert sorted((c.uuid, c.state) for c in listed.checkpoints) == [
        ("a-1", "COMPLETED"),
        ("a-2", "COMPLETED"),
    ]

    # Her own experiment's checkpoints and GC policy are hers to change.
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["m-1"]), metadata=her)
    await api.SetGcPolicy(gc_policy(hers), metadata=her)
    # Pausing someone's experiment stays open to all (Determined's basic mode).
    await api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=theirs), metadata=her)
    assert await deletions(event_store) == [(hers, ["m-1"], "user:mallory")]


async def test_the_owner_and_an_admin_may_delete_checkpoints(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    admin = await logged_in(api)
    her = await mallory(api, admin)
    hers = await experiment_with_checkpoints(api, gateway, event_store, her, 1, "m-1", "m-2")
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["m-1"]), metadata=her)
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["m-2"]), metadata=admin)
    assert await deletions(event_store) == [(hers, ["m-1"], "user:mallory"), (hers, ["m-2"], "user:admin")]
    await api.SetGcPolicy(gc_policy(hers), metadata=admin)
    changed = [
        e for e in await stored(event_store, "experiment") if e.HasField("checkpoint_gc_policy_changed")
    ]
    assert [e.actor for e in changed] == ["user:admin"]
