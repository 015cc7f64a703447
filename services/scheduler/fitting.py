"""Where a gang of slots goes, among a pool's agents that take new work.

A request goes on one agent when one has room: the best fit, the fullest
agent that has room (fewest free slots), ties by agent id, so big blocks stay
whole for big gangs. Else (unless it must run on one agent: a notebook,
TensorBoard, command or shell) it spans several agents: as few as possible, the
ones with most free slots first (idle agents first among equals), the last
one the best fit for what is left; slots are taken in slot-id order.

A fit costs no walk over every agent: the free slots are kept in total and
by room (how many free slots an agent has), so a full pool answers at once
and a best fit looks only at the agents with the least room that is enough.
"""

from dataclasses import dataclass, field

Placement = tuple[str, tuple[int, ...]]


@dataclass
class FreeSlots:
    """The free slots of a pool's usable agents (`add` each), updated as a
    decision places gangs (`take`)."""

    # Agent id -> its free slot ids, in slot-id order.
    free: dict[str, list[int]] = field(default_factory=dict)
    # Agent id -> how many slots it has.
    sizes: dict[str, int] = field(default_factory=dict)
    # Free slots on all the agents.
    total: int = 0
    # Room (free slots on one agent) -> the agents with that much room.
    by_room: dict[int, set[str]] = field(default_factory=dict)
    # The most slots one agent has.
    largest: int = 0

    def add(self, agent_id: str, free: list[int], size: int) -> None:
        self.free[agent_id] = free
        self.sizes[agent_id] = size
        self.largest = max(self.largest, size)
        self.total += len(free)
        self.by_room.setdefault(len(free), set()).add(agent_id)

    def largest_block(self) -> tuple[int, str]:
        """The most free slots on one agent, and that agent ((0, "") when none)."""
        room = max((r for r, agents in self.by_room.items() if agents), default=0)
        return (room, max(self.by_room[room])) if self.free else (0, "")

    def fit(self, slots: int, single_agent: bool = False) -> list[Placement] | None:
        """The placements of a gang of `slots`, or None when the free slots are
        too few (`single_agent`: on one agent)."""
        if not self.free or slots > self.total:
            return None
        enough = [room for room, agents in self.by_room.items() if room >= slots and agents]
        if enough:
            agent_id = min(self.by_room[min(enough)])
            return [(agent_id, tuple(self.free[agent_id][:slots]))]
        if single_agent:
            return None
        by_room = sorted(self.free, key=lambda a: (-len(self.free[a]), len(self.free[a]) < self.sizes[a], a))
        chosen: list[Placement] = []
        left = slots
        for index, agent_id in enumerate(by_room):
            room = len(self.free[agent_id])
            if room >= left:
                # The last agent: the best fit for what is left among the rest.
                _, last = min((len(self.free[a]), a) for a in by_room[index:] if len(self.free[a]) >= left)
                chosen.append((last, tuple(self.free[last][:left])))
                return chosen
            chosen.append((agent_id, tuple(self.free[agent_id])))
            left -= room
        return None

    def where(self, placements: list[Placement]) -> str:
        """Why the gang goes there, in words, before it is taken: "best fit on
        agent-2 (2 of 8 slots free)", "spans 2 agents (a, b): none has 6 free"."""
        if len(placements) == 1:
            agent_id, slot_ids = placements[0]
            if not slot_ids:
                return f"on {agent_id}"
            return f"best fit on {agent_id} ({len(self.free[agent_id])} of {self.sizes[agent_id]} slots free)"
        agents = ", ".join(agent_id for agent_id, _ in placements)
        slots = sum(len(slot_ids) for _, slot_ids in placements)
        return f"spans {len(placements)} agents ({agents}): none has {slots} slots free"

    def take(self, placements: list[Placement]) -> None:
        for agent_id, slot_ids in placements:
            taken = set(slot_ids)
            before = self.free[agent_id]
            after = [s for s in before if s not in taken]
            self.free[agent_id] = after
            self.total -= len(before) - len(after)
            self.by_room[len(before)].discard(agent_id)
            self.by_room.setdefault(len(after), set()).add(agent_id)
