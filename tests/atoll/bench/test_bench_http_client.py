"""The load processes' lean HTTP client against aiohttp's server (the reference: a well-kept HTTP
implementation no one here wrote) and a raw socket server for what aiohttp would not send."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from atoll.bench.http_client import ConnectionLost, HttpClient


async def _aiohttp_server(routes: web.RouteTableDef):
    app = web.Application(client_max_size=1 << 24)
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_statuses_bodies_and_framings_over_kept_alive_connections():
    seen_peers, bodies = set(), []
    routes = web.RouteTableDef()

    @routes.post("/length/{status}")
    async def length(request):
        seen_peers.add(request.transport.get_extra_info("peername"))
        bodies.append(await request.read())
        return web.json_response({"error": "x" * 5000}, status=int(request.match_info["status"]))

    @routes.post("/chunked")
    async def chunked(request):
        await request.read()
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b"a" * 10, b"b" * 70000, b"c"):
            await response.write(part)
        await response.write_eof()
        return response

    @routes.post("/close")
    async def close(request):
        await request.read()
        return web.Response(text="bye", headers={"Connection": "close"})

    async def main():
        runner, url = await _aiohttp_server(routes)
        try:
            client = HttpClient(url, timeout_s=10)
            body = bytes(range(256)) * 4000  # ~1 MB: written in many socket sends
            ok = client.request("/length/200", body, {"Content-Type": "application/octet-stream"})
            busy = client.request("/length/503", b"{}", {"Content-Type": "application/json"})
            statuses = [await client.send(r) for r in (ok, busy, ok, busy)]
            statuses += await asyncio.gather(*(client.send(ok) for _ in range(4)))
            statuses.append(await client.send(client.request("/chunked", b"", {})))
            statuses.append(await client.send(client.request("/length/404", b"", {})))
            before_close = len(client.connections)
            statuses.append(await client.send(client.request("/close", b"", {})))
            await asyncio.sleep(0.05)
            after_close = len(client.connections)
            statuses.append(await client.send(client.request("/nowhere", b"", {})))
            client.close()
            return statuses, before_close, after_close
        finally:
            await runner.cleanup()

    statuses, before_close, after_close = asyncio.run(main())
    assert statuses == [200, 503, 200, 503, 200, 200, 200, 200, 200, 404, 200, 404]
    # the four sequential requests shared one connection; the four concurrent ones needed four
    assert len(seen_peers) == 4
    assert bodies[0] == bytes(range(256)) * 4000 and bodies[1] == b"{}"
    assert after_close == before_close - 1  # "Connection: close" is honoured


async def _raw_server(answer: bytes | None, delay_s: float = 0.0):
    """Answers any request with `answer` and closes; None closes without a word."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(delay_s)
        if answer is not None:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("answer,expected", [
    (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until the end", 200),
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", 502),
    (None, ConnectionLost),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", ConnectionLost),
    (b"garbage\r\n\r\n", ConnectionLost),
])  # fmt: skip
def test_answers_framed_by_the_end_of_the_connection_or_broken(answer, expected):
    async def main():
        server, url = await _raw_server(answer)
        async with server:
            client = HttpClient(url, timeout_s=10)
            try:
                return await client.send(client.request("/", b"x", {}))
            except ConnectionLost as e:
                return e
            finally:
                client.close()

    got = asyncio.run(main())
    if expected is ConnectionLost:
        assert isinstance(got, ConnectionLost)
    else:
        assert got == expected


def test_a_late_answer_is_a_timeout_and_its_connection_is_dropped():
    async def main():
        server, url = await _raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", delay_s=5)
        async with server:
            client = HttpClient(url, timeout_s=0.2)
            with pytest.raises(TimeoutError):
                await client.send(client.request("/", b"x", {}))
            await asyncio.sleep(0.05)
            assert not client.idle and not client.connections
            client.close()

    asyncio.run(main())


def test_only_plain_http_urls():
    async def main():
        with pytest.raises(ValueError, match="plain http"):
            HttpClient("https://example.org", 1.0)

    asyncio.run(main())


def test_connections_are_capped_and_waiting_for_one_counts_towards_the_timeout():
    peers, busy, most = set(), [0], [0]
    routes = web.RouteTableDef()

    @routes.post("/slow")
    async def slow(request):
        peers.add(request.transport.get_extra_info("peername"))
        busy[0] += 1
        most[0] = max(most[0], busy[0])
        await asyncio.sleep(0.1)
        busy[0] -= 1
        return web.Response(text="ok")

    async def main():
        runner, url = await _aiohttp_server(routes)
        try:
            client = HttpClient(url, timeout_s=10, max_connections=2)
            request = client.request("/slow", b"x", {})
            statuses = await asyncio.gather(*(client.send(request) for _ in range(6)))
            # a request that cannot get a connection in time fails like a late answer
            hasty = HttpClient(url, timeout_s=0.15, max_connections=1)
            late = await asyncio.gather(*(hasty.send(request) for _ in range(3)), return_exceptions=True)
            client.close()
            hasty.close()
            return statuses, late
        finally:
            await runner.cleanup()

    statuses, late = asyncio.run(main())
    assert statuses == [200] * 6
    assert most[0] <= 2 and len(peers) == 3  # two for the six, one more for the hasty client
    # the second waits 0.1 s for the connection, then needs 0.1 s more: late on any machine
    assert all(isinstance(r, TimeoutError) for r in late[1:])
