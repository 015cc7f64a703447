"""Kills what an agent started once the agent is gone, however it went:
`python -m services.agent.reaper <work dir> <agent id>`, with the agent's
end of a pipe on its stdin.

The kernel kills each allocation's first process with the agent
(PR_SET_PDEATHSIG), but not what that one started: `sh -c "python3
train.py"` leaves the trial's interpreter, a child of the shell, running. The
agent therefore starts this small process in a session of its own, holding
the write end of its stdin. When the agent ends, even by SIGKILL, the kernel
closes that pipe: the reaper wakes, kills every process group the agent
recorded in its work dir (only while each is still the recorded one, see
`kill_recorded_process_group`) and exits. A restarted agent does the same
before it starts anything (`workdir.recover`), should the reaper have died
with it.
"""

import os
import sys
from pathlib import Path

import structlog

from services.agent import workdir
from services.agent.folders import groups_to_kill
from services.common.logging import configure_logging

log = structlog.get_logger()


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.exit("usage: python -m services.agent.reaper <work dir> <agent id>")
    work_dir, agent_id = Path(argv[1]), argv[2]
    configure_logging("agent-reaper", json=os.environ.get("DET_LOG_JSON", "") in ("1", "true"), log_file=None)
    while os.read(0, 1 << 12):  # the agent writes nothing: EOF when it is gone
        pass
    allocation_ids = groups_to_kill(agent_id, workdir.read_folders(work_dir))
    killed = workdir.kill_groups(work_dir, allocation_ids)
    if killed:
        log.warning("agent_gone_process_groups_killed", agent_id=agent_id, allocation_ids=killed)


if __name__ == "__main__":
    main(sys.argv)
