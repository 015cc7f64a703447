"""The HTTP/JSON API beside gRPC (for the web UI and scripts): Determined's
REST paths and field names under /api/v1, plus /info and /health.

    app      authentication and errors as JSON (the gRPC interceptor's rules)
    routes   the routes, over the features' functions (api.py), as the gRPC servicer
    client_routes  what Determined's own client calls that ours did not (master, pools, jobs v2, users)
    params   query parameters as Determined spells them
    live     server-sent events that tell a web UI page what it shows has changed
    shapes   the API's messages in Determined's JSON shapes
    model_definition  a created experiment's files (modelDefinition) as its context archive
    server   uvicorn inside the gateway's event loop (DET_HTTP_PORT)
    proxy    /proxy/<task id>/: a notebook's, TensorBoard's or shell's server (proxy_rules: what passes)
    task_origin  tasks' pages on a port of their own (DET_PROXY_PORT), apart from the web UI's origin
"""

from starlette.applications import Starlette

from services.gateway.api import Api
from services.gateway.http.app import Authenticate, application
from services.gateway.http.client_routes import client_routes
from services.gateway.http.proxy import TaskProxy
from services.gateway.http.routes import Routes
from services.gateway.http.task_origin import Ports, TaskOrigin


def http_api(api: Api, authenticate: Authenticate, ports: Ports | None = None) -> Starlette:
    """The HTTP API; with `ports`, tasks' pages are served on ports.proxy only (task_origin)."""
    proxy = TaskProxy(
        authenticate,
        api.tasks.proxy_target,
        api.parts.settings.cluster_secret,
        api.tasks.stop_idle_tensorboards,
        ui_port=None if ports is None else ports.ui,
    )
    routes = [*Routes(api, authenticate).routes(), *client_routes(api, authenticate), *proxy.routes()]
    app = application(routes, lifespan=proxy.running)
    if ports is not None:
        app.add_middleware(TaskOrigin, ports=ports)
    return app
