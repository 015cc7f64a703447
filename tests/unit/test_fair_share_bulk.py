"""Fair share's filling worked out in bulk up to a water level (a big pool)
takes what one request at a time takes (a small pool, below
BULK_MIN_SLOTS): both ways, on pools of random jobs, weights, caps and
request sizes, some running."""

import random

import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.scheduler import fair_share
from services.scheduler.config import SchedulerConfig
from services.scheduler.pool import pools_of
from services.scheduler.state import SchedulerState, evolve


def random_pool_state(seed: int) -> SchedulerState:
    rng = random.Random(seed)
    events: list[ev.AgentRegistered | ev.AllocationRequested | ev.AllocationAssigned] = []
    for number in range(rng.randint(1, 12)):
        slots = [ev.Slot(slot_id=n) for n in range(rng.choice([1, 4, 8, 16, 32]))]
        events.append(ev.AgentRegistered(agent_id=f"agent-{number:02d}", slots=slots))
    running = 0
    for number in range(rng.randint(1, 150)):
        job = rng.randrange(1, 8)
        request = ev.AllocationRequested(
            allocation_id=f"{number}.1",
            task_id=str(number),
            slots=rng.choice([1, 1, 2, 4, 8]),
            job_id=f"experiment/{job}",
            weight=job / 2,
            max_slots=(job * 7) % 40 if job % 3 == 0 else 0,
            preemptible=rng.random() < 0.9,
            trial=ev.TrialLaunch(),
        )
        events.append(request)
        if rng.random() < 0.3:  # said to run on agent-00 (where does not matter to the shares)
            running += 1
            placement = ev.Placement(agent_id="agent-00", slot_ids=[running % 1000])
            events.append(ev.AllocationAssigned(allocation_id=request.allocation_id, placements=[placement]))
    state = SchedulerState()
    for n, payload in enumerate(events):
        append = Append(f"x/{n}", payload, f"given-{n}")
        state = evolve(state, wrap(append, actor="test", occurred_at_ns=0))
    return state


def entitlements(state: SchedulerState) -> list[tuple[set[str], dict[str, int]]]:
    return [fair_share._entitlements(pool) for pool in pools_of(state, SchedulerConfig()).values()]


@pytest.mark.parametrize("seed", range(60))
def test_the_bulk_filling_takes_what_one_request_at_a_time_takes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = random_pool_state(seed)
    monkeypatch.setattr(fair_share, "BULK_MIN_SLOTS", 1)
    in_bulk = entitlements(state)
    monkeypatch.setattr(fair_share, "BULK_MIN_SLOTS", 10**9)
    assert entitlements(state) == in_bulk
