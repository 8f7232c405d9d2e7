"""The KServe v2 / Triton HTTP routes, written once for both servers of the protocol: a front end's
(`front_end/http_routes.py`) and the cluster endpoint's (`cluster/http_proxy.py`), each naming a
handler for every action (`http/kserve_api.py` builds its `Routes`). A route is its method ("*":
any), its path pattern (a `{name}` segment matches one segment and is passed to the handler) and
its action; its restricted category (Triton's `--http-restricted-api`) is its pattern's,
`restricted.http_category`. `/metrics` is no KServe route: each server adds its own.
"""

from __future__ import annotations

from typing import NamedTuple

SHM_KINDS = ("systemsharedmemory", "cudasharedmemory")  # the path segment of each shared-memory kind


class Route(NamedTuple):
    method: str
    pattern: str
    action: str


def _routes() -> tuple[Route, ...]:
    r = [Route("GET", "/v2/health/live", "live"), Route("GET", "/v2/health/ready", "server_ready"),
         Route("GET", "/v2", "server_metadata"), Route("POST", "/v2/repository/index", "repository_index"),
         Route("POST", "/v2/repository/models/{model}/load", "load"),
         Route("POST", "/v2/repository/models/{model}/unload", "unload"),
         Route("GET", "/v2/models/stats", "statistics")]  # fmt: skip
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        r += [Route("GET", prefix, "model_metadata"), Route("GET", prefix + "/ready", "model_ready"),
              Route("GET", prefix + "/config", "model_config"), Route("GET", prefix + "/stats", "statistics"),
              Route("POST", prefix + "/infer", "infer")]  # fmt: skip
    for kind in SHM_KINDS:
        r += [Route("GET", f"/v2/{kind}/status", "region_status"),
              Route("GET", f"/v2/{kind}/region/{{region}}/status", "region_status"),
              Route("POST", f"/v2/{kind}/region/{{region}}/register", "register"),
              Route("POST", f"/v2/{kind}/unregister", "unregister"),
              Route("POST", f"/v2/{kind}/region/{{region}}/unregister", "unregister")]  # fmt: skip
    for path in ("/v2/trace/setting", "/v2/models/{model}/trace/setting", "/v2/logging"):
        r.append(Route("*", path, "trace_or_logging"))
    return tuple(r)


ROUTES = _routes()
ACTIONS = frozenset(route.action for route in ROUTES)
