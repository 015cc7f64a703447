"""What becomes of allocation folders and of the process groups earlier runs
of the agent left (services/agent/folders.py): every kind of folder, at
start-up and in the periodic sweep."""

import pytest

from services.agent.folders import (
    AllocationFolder,
    StartUpPlan,
    ended_well,
    folders_to_remove,
    groups_to_kill,
    plan_start_up,
)

ME, OTHER = "agent-1", "agent-2"
NOW = 10_000.0
KEEP = 100.0
LONG_AGO = NOW - KEEP  # exactly old enough
LATELY = NOW - KEEP + 1

# Every folder the work dir can hold: (whose, recorded, failed_at) as workdir.py reads them
# (a folder with no record and no exit note names no agent).
#                                     kill   lost   removed at start-up (keep 100 s)
START_UP = [
    (AllocationFolder("a", None, False, None), False, True, False),  # set-up cut short by the agent's end
    (AllocationFolder("a", ME, True, None), True, True, False),  # its process outlived an earlier run
    (AllocationFolder("a", ME, True, LONG_AGO), True, False, True),  # ended badly long ago
    (AllocationFolder("a", ME, True, LATELY), True, False, False),  # ended badly lately
    (AllocationFolder("a", ME, False, LONG_AGO), False, False, True),  # set-up failed long ago
    (AllocationFolder("a", ME, False, LATELY), False, False, False),  # set-up failed lately
    (AllocationFolder("a", OTHER, True, None), False, False, False),  # another agent's: never touched
    (AllocationFolder("a", OTHER, True, LONG_AGO), False, False, False),
    (AllocationFolder("a", OTHER, True, LATELY), False, False, False),
    (AllocationFolder("a", OTHER, False, LONG_AGO), False, False, False),
    (AllocationFolder("a", OTHER, False, LATELY), False, False, False),
]


@pytest.mark.parametrize(("folder", "kill", "lost", "removed"), START_UP)
def test_start_up(folder: AllocationFolder, kill: bool, lost: bool, removed: bool) -> None:
    plan = plan_start_up(ME, [folder], now=NOW, keep_failed_s=KEEP)
    assert plan == StartUpPlan(("a",) * kill, ("a",) * lost, ("a",) * removed)
    assert groups_to_kill(ME, [folder]) == plan.kill  # what the reaper kills when the agent ends


@pytest.mark.parametrize(("folder", "kill", "lost", "removed"), START_UP)
def test_start_up_keeping_nothing(folder: AllocationFolder, kill: bool, lost: bool, removed: bool) -> None:
    """With keep_failed_s 0, every folder of this agent's that is not running goes at once."""
    plan = plan_start_up(ME, [folder], now=NOW, keep_failed_s=0)
    mine = folder.agent_id in (None, ME)
    assert plan == StartUpPlan(("a",) * kill, (), ("a",) * mine)


def test_start_up_plans_every_folder_in_order() -> None:
    folders = [
        AllocationFolder("1.1", ME, True, None),
        AllocationFolder("2.1", None, False, None),
        AllocationFolder("3.1", ME, True, LONG_AGO),
        AllocationFolder("4.1", OTHER, True, None),
        AllocationFolder("5.1", ME, False, LATELY),
    ]
    assert plan_start_up(ME, folders, now=NOW, keep_failed_s=KEEP) == StartUpPlan(
        kill=("1.1", "3.1"), lost=("1.1", "2.1"), remove=("3.1",)
    )
    assert plan_start_up(ME, [], now=NOW, keep_failed_s=KEEP) == StartUpPlan((), (), ())


# The periodic sweep: (folder, removed when not running).
SWEEP = [
    (AllocationFolder("a", None, False, None), False),  # being set up, or not ours to judge
    (AllocationFolder("a", ME, True, None), False),  # running (or ended well: removed by the runner)
    (AllocationFolder("a", ME, True, LONG_AGO), True),
    (AllocationFolder("a", ME, True, LATELY), False),
    (AllocationFolder("a", ME, False, LONG_AGO), True),
    (AllocationFolder("a", ME, False, LATELY), False),
    (AllocationFolder("a", OTHER, True, LONG_AGO), False),
    (AllocationFolder("a", OTHER, False, LONG_AGO), False),
]


@pytest.mark.parametrize(("folder", "removed"), SWEEP)
@pytest.mark.parametrize("running", [False, True])
def test_sweep(folder: AllocationFolder, removed: bool, running: bool) -> None:
    result = folders_to_remove(ME, [folder], running={"a"} if running else set(), now=NOW, keep_failed_s=KEEP)
    assert result == ("a",) * (removed and not running)


def test_a_running_allocations_folder_is_never_removed_whatever_it_holds() -> None:
    folders = [AllocationFolder(a, ME, True, 0.0) for a in ("1.1", "2.1", "3.1")]
    assert folders_to_remove(ME, folders, running={"1.1", "3.1"}, now=NOW, keep_failed_s=0) == ("2.1",)


@pytest.mark.parametrize(
    ("exit_code", "killed", "error", "well"),
    [
        (0, False, "", True),
        (1, False, "", False),
        (-9, False, "", False),
        (0, True, "", False),  # killed (a stop's grace ran out, a kill): kept for debugging
        (-15, True, "", False),
        (1, False, "no such context", False),  # set-up failed
        (0, False, "agent restarted", False),
    ],
)
def test_which_ends_are_good(exit_code: int, killed: bool, error: str, well: bool) -> None:
    assert ended_well(exit_code, killed=killed, error=error) is well
