"""The graceful stops asked of one allocation, and what they add up to.

Several parts may ask a running allocation to stop gracefully
(AllocationStopRequested): the trial lifecycle when the searcher is done with
the trial or its experiment is paused, the scheduler to preempt it or to free
a disabled agent. When the experiment is activated again before the trial
acknowledged a pause's stop, the lifecycle takes that one request back
(AllocationStopWithdrawn, naming the request's event id) and the trial trains
on, unless another part's request still stands.

A stop the trial acknowledged (AllocationStopAcknowledged) stands whatever the
log holds after it: the trial is on its way out, and its exit 0 means "stopped,
resume me later". The lifecycle and the gateway's read model fold all three
events this way, so they agree in whatever order the events reached the log;
the scheduler and the agent fold requests and withdrawals only (a trial that
acknowledged exits by itself, even when its acknowledgement followed the
withdrawal). Folding an event twice changes nothing.
"""

from dataclasses import dataclass, replace

from google.protobuf.message import Message

from determined.proto import events_pb2


@dataclass(frozen=True)
class Stops:
    # The event ids of the stop requests not withdrawn.
    standing: frozenset[str] = frozenset()
    acknowledged: bool = False

    @property
    def requested(self) -> bool:
        """Whether the allocation is asked to stop."""
        return bool(self.standing) or self.acknowledged

    def folded(self, event_id: str, event: Message) -> "Stops":
        """These stops after the stored event `event_id`, `event` (a stop
        request, withdrawal or acknowledgement; any other changes nothing)."""
        match event:
            case events_pb2.AllocationStopRequested():
                return replace(self, standing=self.standing | {event_id})
            case events_pb2.AllocationStopWithdrawn():
                return replace(self, standing=self.standing - {event.stop_event_id})
            case events_pb2.AllocationStopAcknowledged():
                return replace(self, acknowledged=True)
        return self


NO_STOP = Stops()
