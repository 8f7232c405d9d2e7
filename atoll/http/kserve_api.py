"""What the two KServe v2 HTTP servers (a front end's `front_end/http_routes.py`, the cluster
endpoint's `cluster/http_proxy.py`) share: their routes, built from the one table (`kserve.routes`)
behind Triton's restricted APIs, and a call's JSON body read.
"""

from __future__ import annotations

from collections.abc import Mapping

from atoll.http.messages import Early, Handler, HttpRequest, HttpResponse, Routes, error
from atoll.kserve.errors import ApiError, ErrorCode
from atoll.kserve.protocol import ProtocolError, json_object
from atoll.kserve.restricted import Restrictions
from atoll.kserve.routes import ROUTES


def kserve_routes(handlers: Mapping[str, Handler], restrictions: Restrictions,
                  early: Mapping[str, Early] | None = None) -> Routes:  # fmt: skip
    """Every route of the table, answered by `handlers[its action]` (KeyError for an action without
    one) with `early[its action]`, where given, reading a refusal from a body's first bytes; those of
    a restricted category behind their rule (none costs nothing). Add the server's own routes to it."""
    routes = _RestrictedRoutes(restrictions) if restrictions.http else Routes()
    for route in ROUTES:
        routes.add(route.method, route.pattern, handlers[route.action], (early or {}).get(route.action))
    return routes


def json_body(request: HttpRequest) -> dict:
    """A call's JSON object body (empty when there is none)."""
    if not request.body:
        return {}
    try:
        return json_object(request.body, "request body")
    except ProtocolError as exc:
        raise ApiError(ErrorCode.INVALID_ARG, str(exc)) from None


class _RestrictedRoutes(Routes):
    """Routes whose restricted ones refuse a request without their header (Triton's 403): from its
    head where it has a body (the rest is dropped unread, a large load request's files too), else
    before its handler; the others are added as they are, so an unrestricted route pays nothing."""

    def __init__(self, restrictions: Restrictions):
        super().__init__()
        self.restrictions = restrictions

    def add(self, method: str, pattern: str, handler: Handler, early: Early | None = None) -> None:
        rule = self.restrictions.http_rule(pattern)
        if rule is None:
            super().add(method, pattern, handler, early)
            return

        async def guarded(request: HttpRequest) -> HttpResponse:
            refusal = rule.http_refusal(request.headers)
            return await handler(request) if refusal is None else error(*refusal)

        def guarded_early(request: HttpRequest, prefix: memoryview) -> HttpResponse | None:
            refusal = rule.http_refusal(request.headers)
            if refusal is not None:
                return error(*refusal)
            return early(request, prefix) if early is not None else None

        super().add(method, pattern, guarded, guarded_early)
