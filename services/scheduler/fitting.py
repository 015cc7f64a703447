"""Where a gang of slots goes, among a pool's agents that take new work.

A request goes on one agent when one has room: the best fit, the fullest
agent that has room (fewest free slots), ties by agent id, so big blocks stay
whole for big gangs. Else it spans several agents: as few as possible, the
ones with most free slots first (idle agents first among equals), the last
one the best fit for what is left; slots are taken in slot-id order.
"""

from dataclasses import dataclass

Placement = tuple[str, tuple[int, ...]]


@dataclass
class FreeSlots:
    """The free slots of a pool's usable agents, updated as a decision places
    gangs (`take`)."""

    # Agent id -> its free slot ids, in slot-id order.
    free: dict[str, list[int]]
    # Agent id -> how many slots it has.
    sizes: dict[str, int]

    @property
    def total(self) -> int:
        return sum(len(slots) for slots in self.free.values())

    def largest_block(self) -> tuple[int, str]:
        """The most free slots on one agent, and that agent ((0, "") when none)."""
        return max(((len(s), a) for a, s in sorted(self.free.items(), reverse=True)), default=(0, ""))

    def fit(self, slots: int) -> list[Placement] | None:
        """The placements of a gang of `slots`, or None when the free slots are too few."""
        if not self.free:
            return None
        single = [(len(free), agent_id) for agent_id, free in self.free.items() if len(free) >= slots]
        if single:
            _, agent_id = min(single)
            return [(agent_id, tuple(self.free[agent_id][:slots]))]
        if slots > self.total:
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

    def take(self, placements: list[Placement]) -> None:
        for agent_id, slot_ids in placements:
            taken = set(slot_ids)
            self.free[agent_id] = [s for s in self.free[agent_id] if s not in taken]
