"""Token functions for the ``oauthProvider`` tests (tests/integration/test_secured_oauth.py):
imported by name in every process that makes a Kafka client (the test process, Spark's Python
workers on the driver and executors).

They fetch tokens from the kit's OIDC token endpoint with the client-credentials grant, as a
cloud SDK fetches from its own service. Where the endpoint is, and who the client is, comes
from a file the test writes (:func:`configure`): Spark's Python workers inherit no settings
from the test. Each call appends a line (process id, time) to a log next to it, so the test
can count calls per process.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
import urllib.request
from pathlib import Path

DIRECTORY = Path(tempfile.gettempdir()) / f"kafka-direct-oauth-test-{os.getuid()}"
SETTINGS = DIRECTORY / "provider.json"
CALLS = DIRECTORY / "calls.log"


def configure(token_url: str, client_id: str, secret: str) -> None:
    DIRECTORY.mkdir(mode=0o700, exist_ok=True)
    SETTINGS.write_text(json.dumps({"url": token_url, "id": client_id, "secret": secret}))
    CALLS.write_text("")


def calls() -> list[tuple[int, float]]:
    """(process id, time) of every call since :func:`configure`."""
    lines = CALLS.read_text().split()
    return [(int(pid), float(at)) for pid, at in (line.split(",") for line in lines)]


def short_token() -> tuple[str, float]:
    """A token from the kit's endpoint and its expiry (Unix seconds), as MSK's and Entra's
    SDK calls give theirs."""
    settings = json.loads(SETTINGS.read_text())
    basic = base64.b64encode(f"{settings['id']}:{settings['secret']}".encode()).decode()
    request = urllib.request.Request(
        settings["url"],
        data=b"grant_type=client_credentials&scope=kafka",
        headers={"Authorization": f"Basic {basic}",
                 "Content-Type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = json.loads(answer.read())
    with CALLS.open("a") as log:
        log.write(f"{os.getpid()},{time.time()}\n")
    return body["access_token"], time.time() + float(body["expires_in"])


def milliseconds_token() -> tuple[str, float]:
    """The mistake MSKAuthTokenProvider invites: the expiry in milliseconds."""
    token, expiry = short_token()
    return token, expiry * 1000


NOT_A_FUNCTION = "a string"
