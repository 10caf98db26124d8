"""A schema id the registry does not have costs one request per id per worker for a while, not
one per record: a topic whose records name a deleted schema (or a read against the wrong
registry) in PERMISSIVE mode would otherwise send the registry a request for every record. A
local HTTP server that answers "not found" and counts; no registry."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa
import pytest

from kafka_direct.schema_registry import client as client_module
from kafka_direct.schema_registry.avro_codec import AvroDecoder
from kafka_direct.schema_registry.avro_native import DISABLE_ENV as AVRO_NATIVE
from kafka_direct.schema_registry.client import MISSING_ID_TTL_S, RegistryClient, clear_cache
from kafka_direct.schema_registry.errors import SchemaNotFoundError
from kafka_direct.schema_registry.options import parse_registry
from kafka_direct.schema_registry.protobuf_codec import ProtobufDecoder
from tests.unit.schema_registry.local_http import JsonHandler, serve

MISSING_ID = 4242


class _NotFound:
    """Answers every GET with Confluent's "schema not found" and keeps the paths asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                self.send_json(404, {"error_code": 40403, "message": "Schema not found"})

        self.httpd, self.url = serve(Handler)


@pytest.fixture
def registry() -> Iterator[_NotFound]:
    clear_cache()
    server = _NotFound()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()
    clear_cache()


def _records(n: int, schema_id: int = MISSING_ID) -> pa.Array:
    return pa.array([b"\x00" + struct.pack(">I", schema_id) + b"\x02" for _ in range(n)])


def test_a_missing_id_is_asked_once_then_again_after_its_time(
    registry: _NotFound, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = RegistryClient(parse_registry(registry.url, {}))
    for _ in range(5):
        with pytest.raises(SchemaNotFoundError, match=f"no schema with id {MISSING_ID}"):
            client.schema_by_id(MISSING_ID)
    assert registry.paths == [f"/schemas/ids/{MISSING_ID}"]
    with pytest.raises(SchemaNotFoundError):
        client.schema_by_id(MISSING_ID + 1)  # another id is its own question
    assert len(registry.paths) == 2
    now = client_module.time.monotonic()
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now + MISSING_ID_TTL_S + 1)
    with pytest.raises(SchemaNotFoundError):
        client.schema_by_id(MISSING_ID)
    assert registry.paths[-1] == f"/schemas/ids/{MISSING_ID}" and len(registry.paths) == 3


@pytest.mark.parametrize("native", ["1", "0"], ids=["C path", "fastavro path"])
def test_a_permissive_avro_read_asks_once_for_a_batch_of_records_with_a_missing_id(
    registry: _NotFound, monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    monkeypatch.setenv(AVRO_NATIVE, native)
    decoder = AvroDecoder(
        '"int"', pa.int32(), registry=parse_registry(registry.url, {}), mode="PERMISSIVE"
    )
    failed: list[int] = []
    for _ in range(3):  # three batches of a task
        assert decoder.decode(_records(50), failed=failed).to_pylist() == [None] * 50
    assert sorted(failed) == sorted(list(range(50)) * 3)
    assert registry.paths == [f"/schemas/ids/{MISSING_ID}"]


def test_a_permissive_protobuf_read_asks_once_for_records_with_a_missing_id(
    registry: _NotFound,
) -> None:
    decoder = ProtobufDecoder(
        pa.struct([("a", pa.int32())]), parse_registry(registry.url, {}), "PERMISSIVE"
    )
    # Confluent's Protobuf framing: magic byte, id, message indexes ([0] as one 0 byte), body.
    values = pa.array([b"\x00" + struct.pack(">I", MISSING_ID) + b"\x00\x08\x01"] * 50)
    failed: list[int] = []
    for _ in range(3):
        assert decoder.decode(values, failed=failed).to_pylist() == [None] * 50
    assert len(failed) == 150
    assert registry.paths == [f"/schemas/ids/{MISSING_ID}"]
