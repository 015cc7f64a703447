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
"""

from starlette.applications import Starlette

from services.gateway.api import Api
from services.gateway.http.app import Authenticate, application
from services.gateway.http.client_routes import client_routes
from services.gateway.http.proxy import TaskProxy
from services.gateway.http.routes import Routes


def http_api(api: Api, authenticate: Authenticate) -> Starlette:
    proxy = TaskProxy(
        authenticate,
        api.tasks.proxy_target,
        api.parts.settings.cluster_secret,
        api.tasks.stop_idle_tensorboards,
    )
    routes = [*Routes(api, authenticate).routes(), *client_routes(api, authenticate), *proxy.routes()]
    return application(routes, lifespan=proxy.running)
