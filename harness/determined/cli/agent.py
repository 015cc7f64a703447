"""`det agent list | enable | disable` and `det slot list | enable | disable`:
the agents, their state, and what runs on each of their slots."""

import argparse
from typing import Any

from determined.cli._as_of import add_as_of_arguments, as_of, print_as_of
from determined.cli._client import connect
from determined.cli._output import format_time, message_dict, print_json, print_table

AGENT_HEADERS = [
    "Agent ID",
    "Hostname",
    "Registered Time",
    "Slots",
    "Containers",
    "Resource Pool",
    "State",
    "Address",
    "Runtime",
]
SLOT_HEADERS = ["Agent ID", "Resource Pool", "Slot ID", "State", "Allocation ID", "Task", "Type", "Device"]


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    agent = commands.add_parser("agent", aliases=["a"], help="the cluster's agents")
    agent_verbs = agent.add_subparsers(dest="verb", metavar="<verb>")
    agent.set_defaults(run=list_agents, json=False, at=None, at_seq=None)
    agents = agent_verbs.add_parser("list", aliases=["ls"], help="list agents")
    agents.add_argument("--json", action="store_true")
    add_as_of_arguments(agents)
    agents.set_defaults(run=list_agents)
    enable = agent_verbs.add_parser("enable", help="let the agent take work again")
    _add_agent_choice(enable)
    enable.set_defaults(run=enable_agent)
    disable = agent_verbs.add_parser(
        "disable", help="place nothing new on the agent; its running work is stopped (to resume elsewhere)"
    )
    _add_agent_choice(disable)
    disable.add_argument("--drain", action="store_true", help="let the work running there finish instead")
    disable.set_defaults(run=disable_agent)

    slot = commands.add_parser("slot", aliases=["s"], help="the slots agents offer")
    slot_verbs = slot.add_subparsers(dest="verb", metavar="<verb>")
    slot.set_defaults(run=list_slots, json=False, at=None, at_seq=None)
    slots = slot_verbs.add_parser("list", aliases=["ls"], help="list slots and what runs on each")
    slots.add_argument("--json", action="store_true")
    add_as_of_arguments(slots)
    slots.set_defaults(run=list_slots)
    slot_enable = slot_verbs.add_parser("enable", help="let the slot take work again")
    slot_enable.add_argument("agent_id", metavar="AGENT_ID")
    slot_enable.add_argument("slot_id", type=slot_id, metavar="SLOT_ID")
    slot_enable.set_defaults(run=enable_slot)
    slot_disable = slot_verbs.add_parser(
        "disable", help="place nothing new on the slot; the work on it is stopped (to resume elsewhere)"
    )
    slot_disable.add_argument("agent_id", metavar="AGENT_ID")
    slot_disable.add_argument("slot_id", type=slot_id, metavar="SLOT_ID")
    slot_disable.add_argument("--drain", action="store_true", help="let the work on it finish instead")
    slot_disable.set_defaults(run=disable_slot)


def _add_agent_choice(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("agent_id", metavar="AGENT_ID", nargs="?")
    which.add_argument("--all", action="store_true", help="every agent")


def slot_id(text: str) -> int:
    """A slot's id on its agent: 0 or more."""
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a slot id (a whole number)") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a slot id: slot ids go from 0")
    return value


def _agents(args: argparse.Namespace) -> Any:
    """The agents (as they were, with --at or --at-seq: then the point is printed first)."""
    from determined.proto import api_pb2

    gateway = connect(args)
    response = gateway.call(gateway.stub.GetAgents, api_pb2.GetAgentsRequest(as_of=as_of(args)))
    if not args.json:
        print_as_of(response)
    return response.agents


def list_agents(args: argparse.Namespace) -> int:
    agents = _agents(args)
    if args.json:
        print_json([message_dict(a) for a in agents])
        return 0
    print_table(AGENT_HEADERS, [agent_row(a) for a in agents])
    return 0


def agent_row(agent: Any) -> list[Any]:
    """Containers: the allocations running on the agent (one per allocation, as
    each runs one process group there)."""
    running = {use.allocation_id for use in agent.slot_uses if use.allocation_id}
    return [
        agent.agent_id,
        agent.hostname,
        format_time(agent.registered_at_ns),
        len(agent.slots),
        len(running),
        agent.resource_pool,
        agent.state or "ENABLED",
        agent.address,
        agent.runtime or "process",
    ]


def list_slots(args: argparse.Namespace) -> int:
    agents = _agents(args)
    if args.json:
        print_json(
            [
                dict(message_dict(s), agent_id=a.agent_id, **_use_dict(a, s.slot_id))
                for a in agents
                for s in a.slots
            ]
        )
        return 0
    print_table(SLOT_HEADERS, [row for a in agents for row in slot_rows(a)])
    return 0


def slot_rows(agent: Any) -> list[list[Any]]:
    uses = {use.slot_id: use for use in agent.slot_uses}
    rows = []
    for slot in agent.slots:
        use = uses.get(slot.slot_id)
        allocation = use.allocation_id if use is not None else ""
        task = (
            f"trial {use.trial_id} (experiment {use.experiment_id})"
            if use is not None and use.trial_id
            else ""
        )
        rows.append(
            [
                agent.agent_id,
                agent.resource_pool,
                slot.slot_id,
                slot_state(agent.state, use.state if use is not None else "", bool(allocation)),
                allocation or "FREE",
                task if allocation else "",
                slot.type,
                slot.device,
            ]
        )
    return rows


def slot_state(agent_state: str, own_state: str, busy: bool) -> str:
    """A slot's state: DISABLED or DRAINING when an admin disabled the slot
    itself, else RUNNING when something runs there, else whether it can take
    work (its agent's state)."""
    if own_state not in ("", "ENABLED"):
        return own_state
    if busy:
        return "RUNNING"
    return "FREE" if agent_state in ("", "ENABLED") else agent_state


def _use_dict(agent: Any, slot_id: int) -> dict[str, Any]:
    use = next((u for u in agent.slot_uses if u.slot_id == slot_id), None)
    state = {"state": (use.state if use is not None else "") or "ENABLED"}
    if use is None or not use.allocation_id:
        return {"allocation_id": "", "trial_id": 0, "experiment_id": 0, **state}
    return {
        "allocation_id": use.allocation_id,
        "trial_id": use.trial_id,
        "experiment_id": use.experiment_id,
        **state,
    }


def _chosen_agents(gateway: Any, args: argparse.Namespace) -> list[str]:
    """The agent named, or with --all every registered agent."""
    from determined.proto import api_pb2

    if not args.all:
        return [args.agent_id]
    return [a.agent_id for a in gateway.call(gateway.stub.GetAgents, api_pb2.GetAgentsRequest()).agents]


def enable_agent(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    for agent_id in _chosen_agents(gateway, args):
        response = gateway.call(gateway.stub.EnableAgent, api_pb2.EnableAgentRequest(agent_id=agent_id))
        print(response.unchanged_reason or f"Enabled agent {agent_id}")
    return 0


def disable_agent(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    for agent_id in _chosen_agents(gateway, args):
        request = api_pb2.DisableAgentRequest(agent_id=agent_id, drain=args.drain)
        response = gateway.call(gateway.stub.DisableAgent, request)
        done = (
            f"Disabled agent {agent_id}; the work running there finishes (draining)"
            if args.drain
            else f"Disabled agent {agent_id}; the work running there is stopped to resume elsewhere"
        )
        print(response.unchanged_reason or done)
    return 0


def enable_slot(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    gateway.call(
        gateway.stub.EnableSlot, api_pb2.EnableSlotRequest(agent_id=args.agent_id, slot_id=args.slot_id)
    )
    print(f"Enabled slot {args.slot_id} of agent {args.agent_id}")
    return 0


def disable_slot(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.DisableSlotRequest(agent_id=args.agent_id, slot_id=args.slot_id, drain=args.drain)
    gateway.call(gateway.stub.DisableSlot, request)
    how = (
        "the work on it finishes (draining)"
        if args.drain
        else "the work on it is stopped to resume elsewhere"
    )
    print(f"Disabled slot {args.slot_id} of agent {args.agent_id}; {how}")
    return 0
