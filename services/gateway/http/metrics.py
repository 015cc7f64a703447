"""GET /metrics: the cluster's metrics for Prometheus (features/monitoring/).

Who may read them: a request from this machine (loopback: 127.0.0.0/8, ::1)
without credentials, as a Prometheus or node agent running beside the
gateway scrapes; any other request with an admin's session token
(`Authorization: Bearer`, from login): without one 401, a non-admin's 403.
A request that carries a token is checked, from loopback too. The address is
the connection's (the HTTP server believes no X-Forwarded-For), so a reverse
proxy on the same machine makes every client it forwards loopback: let it
pass /metrics to no one but Prometheus, or have it add the token.
"""

import ipaddress

from starlette.requests import Request
from starlette.responses import Response

from services.gateway.api import Api
from services.gateway.auth import acting_as, require_admin
from services.gateway.http.app import Authenticate, Handler, credentials


def metrics_endpoint(api: Api, authenticate: Authenticate) -> Handler:
    async def metrics(request: Request) -> Response:
        accept = request.headers.get("accept", "")
        if request.headers.get("authorization") is None and is_loopback(request):
            body, media_type = await api.monitoring.exposition(accept)
        else:
            with acting_as(await authenticate(credentials(request))):
                require_admin("reading the cluster's metrics (/metrics)")
                body, media_type = await api.monitoring.exposition(accept)
        return Response(body, headers={"content-type": media_type})

    return metrics


def is_loopback(request: Request) -> bool:
    """Whether the request came over a loopback connection."""
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:  # not an address (a test client's name)
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback  # ::ffff:127.0.0.1 on a dual-stack socket too
