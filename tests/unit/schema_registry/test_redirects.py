"""The registry client sends its credentials only to the origin they were given for: urllib
copies every header to a redirect's URL, so a redirect to another host (or from https to http)
would hand the Authorization header to it. Two local HTTP servers, no registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.options import parse_registry
from tests.unit.schema_registry.local_http import JsonHandler, serve

BASIC = {"confluent.schema.registry.basic.auth.user.info": "alice:s3cret"}
BEARER = {"confluent.schema.registry.bearer.auth.token": "TOKEN-1"}


class _Server:
    """Answers every GET: a 302 to ``redirect_to`` + the path when set, else a schema; keeps
    the Authorization header of each request it got."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.redirect_to: str | None = None
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                server.seen.append(self.headers.get("Authorization"))
                if server.redirect_to is not None and not self.path.startswith("/moved"):
                    self.send_response(302)
                    self.send_header("Location", server.redirect_to + "/moved" + self.path)
                    self.end_headers()
                    return
                self.send_json(200, {"schema": '"string"'})

        self.httpd, self.url = serve(Handler)


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    pair = (_Server(), _Server())
    yield pair
    for server in pair:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.mark.parametrize("auth", [BASIC, BEARER], ids=["basic", "bearer"])
def test_credentials_never_follow_a_redirect_to_another_origin(
    servers: tuple[_Server, _Server], auth: dict[str, str]
) -> None:
    home, elsewhere = servers
    home.redirect_to = elsewhere.url.replace("127.0.0.1", "localhost")  # another host name
    client = RegistryClient(parse_registry(home.url, auth))
    assert client.request("GET", "/schemas/ids/7") == {"schema": '"string"'}
    assert home.seen[0] is not None and home.seen[0].split()[0] in ("Basic", "Bearer")
    assert elsewhere.seen == [None]


def test_a_redirect_within_the_registry_keeps_the_credentials(
    servers: tuple[_Server, _Server],
) -> None:
    home, _ = servers
    home.redirect_to = home.url
    client = RegistryClient(parse_registry(home.url, BEARER))
    assert client.request("GET", "/schemas/ids/7") == {"schema": '"string"'}
    assert home.seen == ["Bearer TOKEN-1", "Bearer TOKEN-1"]
