"""Each process trial has its own /tmp, as a container would (the seed quickstart's trials
once read each other's half-written /tmp/data-rank0): two trials on one agent write the
same literal /tmp path at the same time, each reads back its own, and the machine's /tmp
has neither. Both ways a trial starts: a new process, and a child of the fork server."""

import os
from pathlib import Path

import pytest
from test_services_flow import cluster, config, create_experiment, payloads, trial_logs, wait_for

from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.common.eventstore import EventStore

TS = ev.TrialState


@pytest.mark.parametrize("fork", [False, True], ids=["process", "forked"])
async def test_two_trials_writing_the_same_tmp_path_each_see_their_own(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path, fork: bool
) -> None:
    name = f"det-quickstart-data-{os.getpid()}-{fork}"
    met = tmp_path / "met"  # beside the agent's work folder: a tree the trials still see
    met.mkdir(mode=0o777)
    met.chmod(0o777)
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(
        "import os, sys, time\n"
        "me = os.environ['DET_TRIAL_ID']\n"
        f"with open('/tmp/{name}', 'x') as file:\n"  # fails if the other trial's is there
        "    file.write(me)\n"
        f"open(os.path.join({str(met)!r}, me), 'w').close()\n"
        f"while len(os.listdir({str(met)!r})) < 2:\n"  # both are running, both have written
        "    time.sleep(0.02)\n"
        f"print('read', open('/tmp/{name}').read(), 'as', me, 'forked', 'determined.core' in sys.modules)\n"
    )
    digest = await event_store.contexts.put(pack_context(context))
    cfg = config(
        "python3 train.py",
        max_restarts=0,
        searcher={"name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": 2},
    )
    settings: dict[str, object] = {"nats_url": nats_url, "namespace": namespace, "cluster_secret": "s"}
    async with cluster(settings, tmp_path / "work", agent_cpu_slots=2, agent_fork_server=fork):
        await create_experiment(event_store, 1, cfg, context_hash=digest)
        envelopes = await wait_for(event_store, lambda es: len(payloads(es, ev.TrialEnded)) == 2)
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_COMPLETED] * 2
    for trial_id in (1, 2):
        lines = [line.log for batch in await trial_logs(event_store, trial_id) for line in batch.lines]
        assert lines == [f"read {trial_id} as {trial_id} forked {fork}"]
    assert not Path(f"/tmp/{name}").exists()
