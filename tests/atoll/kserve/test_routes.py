"""The one KServe route table: every route belongs to one of Triton's restricted categories (its
pattern's), and the front end and the cluster endpoint both serve every route of it behind them."""

from __future__ import annotations

import asyncio

from atoll.cluster.http_proxy import HttpProxy
from atoll.front_end.http_routes import InferenceServer
from atoll.http.messages import HttpRequest
from atoll.kserve.restricted import CATEGORIES, Restrictions, http_category
from atoll.kserve.routes import ROUTES


def test_every_route_has_its_restricted_category():
    assert {http_category(route.pattern) for route in ROUTES} == set(CATEGORIES)


def test_both_servers_refuse_every_route_of_a_restricted_category_without_its_header():
    restricted = Restrictions.parse([",".join(CATEGORIES) + ":key=value"], [])
    servers = {"front end": InferenceServer(None, None, restrictions=restricted).routes(),
               "cluster endpoint": HttpProxy(None, restricted, 1.0).routes()}  # fmt: skip
    for name, routes in servers.items():
        for route in ROUTES:
            path = route.pattern.replace("{model}", "m").replace("{version}", "1").replace("{region}", "r")
            request = HttpRequest("POST" if route.method == "*" else route.method, path, "", {})
            answer = asyncio.run(routes.resolve(request)(request))
            assert answer.status == 403, (name, route)
        metrics = HttpRequest("GET", "/metrics", "", {})
        assert routes.resolve(metrics) is not None  # each server's own route, never restricted
