"""How the gateway answers what it cannot store: errors of the layers below become statuses
a trial can act on (retry, or split and drop), and an event too large for the event log is
refused before anything is appended."""

import grpc
import nats.errors
import nats.js.errors
import pytest

from determined.proto import api_pb2, events_pb2
from services.gateway.errors import (
    EVENT_LOG_UNAVAILABLE,
    EventLogUnavailableError,
    InvalidArgumentError,
    NotFoundError,
    as_gateway_error,
)
from services.gateway.features.trials import commands as trial_commands
from services.gateway.grpc_status import status_for


@pytest.mark.parametrize(
    "error",
    [
        nats.errors.TimeoutError(),
        nats.errors.ConnectionClosedError(),
        nats.errors.OutboundBufferLimitError(),
        nats.errors.NoRespondersError(),
        nats.js.errors.NoStreamResponseError(),
        nats.js.errors.ServiceUnavailableError(),
    ],
)
def test_a_nats_server_outage_answers_unavailable_naming_it(error: Exception) -> None:
    translated = as_gateway_error(error)
    assert isinstance(translated, EventLogUnavailableError)
    assert status_for(translated) == (grpc.StatusCode.UNAVAILABLE, EVENT_LOG_UNAVAILABLE)


def test_an_event_over_max_payload_answers_invalid_argument() -> None:
    translated = as_gateway_error(nats.errors.MaxPayloadError())
    assert isinstance(translated, InvalidArgumentError) and "max_payload" in str(translated)


def test_gateway_errors_stand_for_themselves_and_bugs_for_nothing() -> None:
    not_found = NotFoundError("trial 3 not found")
    assert as_gateway_error(not_found) is not_found
    assert as_gateway_error(KeyError("x")) is None


def test_a_batch_with_an_event_too_large_is_refused_whole_naming_the_limit() -> None:
    reports = [
        events_pb2.MetricReport(group="validation", steps_completed=1, metrics_json='{"loss": 1}'),
        events_pb2.MetricReport(
            group="training", steps_completed=1, metrics_json='{"x": "' + "x" * 5000 + '"}'
        ),
    ]
    request = api_pb2.ReportMetricsRequest(
        trial_id=1, trial_run_id=1, batch_seq=4, reporter_id="p", reports=reports
    )
    appends = trial_commands.metrics_reported(request, experiment_id=1)
    trial_commands.check_event_sizes(appends, 16 * 1024, "metrics batch 4")
    with pytest.raises(InvalidArgumentError) as refused:
        trial_commands.check_event_sizes(appends, 8 * 1024, "metrics batch 4")
    assert str(refused.value).startswith("metrics batch 4 is too large for the event log: 50")
    assert "at most 4096 (nats-server's max_payload of 8192 bytes less 4096 for the envelope)" in str(
        refused.value
    )
