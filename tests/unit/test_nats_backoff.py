"""How often a part tries nats-server again while it is down."""

from services.common.connection import MAX_RETRY_S, retry_delay


def test_retries_back_off_up_to_a_cap() -> None:
    delays = [retry_delay(attempt) for attempt in range(100)]
    assert delays[:3] == [0.1, 0.2, 0.4]
    assert delays == sorted(delays) and max(delays) == MAX_RETRY_S
