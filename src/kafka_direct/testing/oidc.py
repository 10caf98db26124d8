"""A small OpenID Connect provider for OAUTHBEARER tests: a JWKS and a client-credentials token
endpoint. Plain library: runs in the user's (or the test suite's) process, serving HTTP from a
daemon thread of its own.

Kafka's broker validates OAUTHBEARER tokens itself (``OAuthBearerValidatorCallbackHandler``):
it fetches the signing keys from a JWKS URL and checks each token's signature (RS256), expiry,
issuer and audience. Clients get their tokens from a token endpoint with OAuth 2.0's
client-credentials grant (RFC 6749 §4.4), as librdkafka's ``sasl.oauthbearer.method=oidc`` and
Java's ``OAuthBearerLoginCallbackHandler`` do. :class:`OidcProvider` is both::

    with OidcProvider(clients={"spark-job": "job-secret"}, scopes={"kafka"}) as oidc:
        oidc.jwks_url        # http://127.0.0.1:<port>/jwks
        oidc.token_url       # http://127.0.0.1:<port>/token
        oidc.tokens_issued   # how many tokens the endpoint has handed out

The token endpoint takes the client's id and secret as HTTP Basic authentication (what
librdkafka and Java send) or as form fields, refuses an unknown client, a wrong secret and a
scope it does not grant with OAuth's ``invalid_client`` / ``invalid_scope`` (HTTP 401 / 400),
and signs tokens with :class:`~kafka_direct.testing.tokens.TokenIssuer` whose subject is the
client id: the broker's principal is ``User:<client id>``. Secrets and tokens are never logged.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import types
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kafka_direct.testing.tokens import TokenIssuer, token_claims

__all__ = ["KAFKA_AUDIENCE", "KAFKA_ISSUER", "OidcProvider"]

#: The ``iss`` and ``aud`` of the tokens, and what the kit's broker expects.
KAFKA_ISSUER = "https://oidc.kafka-direct.test"
KAFKA_AUDIENCE = "kafka-direct-broker"
_KID = "kafka-direct-test-key"


class OidcProvider:
    """A JWKS and a client-credentials token endpoint on 127.0.0.1 (module docstring).

    ``clients`` maps client ids to secrets; ``scopes`` are the scopes it grants (any subset may
    be asked for; none asked means none in the token); ``lifetime_s`` is each token's life,
    ``lifetimes`` a client's own (short-lived tokens, to see clients refresh them).
    """

    def __init__(
        self,
        clients: Mapping[str, str],
        *,
        scopes: set[str] | frozenset[str] = frozenset({"kafka"}),
        lifetime_s: float = 3600.0,
        lifetimes: Mapping[str, float] | None = None,
        issuer: str = KAFKA_ISSUER,
        audience: str = KAFKA_AUDIENCE,
    ) -> None:
        self.clients = dict(clients)
        self.scopes = frozenset(scopes)
        self.lifetime_s = lifetime_s
        self.lifetimes = dict(lifetimes or {})
        self.issuer = issuer
        self.audience = audience
        self.tokens_issued = 0
        self.refusals = 0
        self._issuer = TokenIssuer()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("The OIDC provider is not started: call start() first.")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks"

    @property
    def token_url(self) -> str:
        return self.url + "/token"

    # ------------------------------------------------------------------------------ tokens
    def jwks(self) -> dict[str, Any]:
        return {"keys": [self._issuer.public_jwk(_KID)]}

    def sign(self, claims: Mapping[str, Any]) -> str:
        """``claims`` signed with the provider's key (tests of what the broker refuses)."""
        return self._issuer.sign(claims, kid=_KID)

    def mint(self, subject: str, scope: str = "", lifetime_s: float | None = None) -> str:
        """A signed token for ``subject``, as the endpoint issues it (and counted as one)."""
        claims = token_claims(
            subject,
            now=time.time(),
            lifetime_s=self.lifetime_s if lifetime_s is None else lifetime_s,
            issuer=self.issuer,
            audience=self.audience,
        )
        if scope:
            claims["scope"] = scope
        with self._lock:
            self.tokens_issued += 1
        return self._issuer.sign(claims, kid=_KID)

    def grant(
        self, form: Mapping[str, str], authorization: str | None
    ) -> tuple[int, dict[str, Any]]:
        """The token endpoint's answer (status, JSON body) to a request's form fields and
        ``Authorization`` header."""
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization and authorization.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(authorization[6:].strip()).decode()
            except ValueError:
                decoded = ":"
            pair = decoded.split(":", 1)
            client_id = urllib.parse.unquote_plus(pair[0])
            secret = urllib.parse.unquote_plus(pair[1] if len(pair) > 1 else "")
        if form.get("grant_type") != "client_credentials":
            return self._refuse(400, "unsupported_grant_type", "only client_credentials")
        if client_id not in self.clients or self.clients[client_id] != secret:
            return self._refuse(401, "invalid_client", "unknown client or wrong secret")
        asked = form.get("scope", "").split()
        if not set(asked) <= self.scopes:
            return self._refuse(400, "invalid_scope", f"grantable scopes: {sorted(self.scopes)}")
        lifetime = self.lifetimes.get(client_id, self.lifetime_s)
        token = self.mint(client_id, " ".join(asked), lifetime)
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(lifetime),
            **({"scope": " ".join(asked)} if asked else {}),
        }

    def _refuse(self, status: int, error: str, why: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.refusals += 1
        return status, {"error": error, "error_description": why}

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> OidcProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] in ("/jwks", "/.well-known/jwks.json"):
                    self._answer(200, provider.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace")
                form = dict(urllib.parse.parse_qsl(body))
                if self.path.split("?")[0] != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*provider.grant(form, self.headers.get("Authorization")))

            def _answer(self, status: int, body: Mapping[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a request line can carry a client id; the tests need no access log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kafka-direct-oidc", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OidcProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "stopped" if self._server is None else self.url
        return f"OidcProvider({where}, clients={sorted(self.clients)})"
