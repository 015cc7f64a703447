"""`det agent list` and `det slot list`: the agents and the slots they offer."""

import argparse
from typing import Any

from determined.cli._client import Gateway, master_address
from determined.cli._output import format_time, message_dict, print_json, print_table


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    agent = commands.add_parser("agent", aliases=["a"], help="the cluster's agents")
    agent_verbs = agent.add_subparsers(dest="verb", metavar="<verb>")
    agent.set_defaults(run=list_agents, json=False)
    agents = agent_verbs.add_parser("list", aliases=["ls"], help="list agents")
    agents.add_argument("--json", action="store_true")
    agents.set_defaults(run=list_agents)

    slot = commands.add_parser("slot", aliases=["s"], help="the slots agents offer")
    slot_verbs = slot.add_subparsers(dest="verb", metavar="<verb>")
    slot.set_defaults(run=list_slots, json=False)
    slots = slot_verbs.add_parser("list", aliases=["ls"], help="list slots")
    slots.add_argument("--json", action="store_true")
    slots.set_defaults(run=list_slots)


def _agents(args: argparse.Namespace) -> Any:
    from determined.proto import api_pb2

    gateway = Gateway(master_address(args.master))
    return gateway.call(gateway.stub.GetAgents, api_pb2.GetAgentsRequest()).agents


def list_agents(args: argparse.Namespace) -> int:
    agents = _agents(args)
    if args.json:
        print_json([message_dict(a) for a in agents])
        return 0
    print_table(
        ["Agent ID", "Hostname", "Registered Time", "Slots", "Resource Pool"],
        [[a.agent_id, a.hostname, format_time(a.registered_at_ns), len(a.slots), "default"] for a in agents],
    )
    return 0


def list_slots(args: argparse.Namespace) -> int:
    agents = _agents(args)
    if args.json:
        print_json([dict(message_dict(s), agent_id=a.agent_id) for a in agents for s in a.slots])
        return 0
    print_table(
        ["Agent ID", "Resource Pool", "Slot ID", "Type", "Device"],
        [[a.agent_id, "default", s.slot_id, s.type, s.device] for a in agents for s in a.slots],
    )
    return 0
