"""Unit tests for kafka_direct.schema_registry.protobuf_schema: Protobuf files built from the
registry's two forms (.proto text, base64 descriptor) with their referenced files."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.protobuf_schema import (
    file_descriptor,
    message_descriptor,
    to_spark_type,
)

ADDRESS = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; }\n'
CUSTOMER = (
    'syntax = "proto3";\npackage crm;\nimport "geo/address.proto";\n'
    'import "google/protobuf/timestamp.proto";\n'
    "message Customer {\n  string name = 1;\n  geo.Address home = 2;\n"
    "  google.protobuf.Timestamp at = 3;\n}\n"
)
ORDER = (
    'syntax = "proto3";\npackage shop;\nimport "crm/customer.proto";\n'
    "message Order { int64 id = 1; crm.Customer buyer = 2; }\n"
)
EXPECTED = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {
            "name": "buyer",
            "type": {
                "type": "struct",
                "fields": [
                    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
                    {
                        "name": "home",
                        "type": {
                            "type": "struct",
                            "fields": [
                                {"name": "city", "type": "string", "nullable": True, "metadata": {}}
                            ],
                        },
                        "nullable": True,
                        "metadata": {},
                    },
                    {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}},
                ],
            },
            "nullable": True,
            "metadata": {},
        },
    ],
}


def _base64(text: str, name: str, dependencies: list[tuple[str, str]]) -> str:
    """The base64 descriptor confluent-kafka-python registers for a file."""
    serialized = file_descriptor(text, dependencies).serialized_pb
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
    proto.name = name
    return base64.b64encode(proto.SerializeToString()).decode()


def _order(dependencies: list[tuple[str, str]], main: str = ORDER) -> Any:
    return message_descriptor(file_descriptor(main, dependencies), name="Order")


def test_proto_text_importing_proto_text_files_through_references() -> None:
    order = _order([("geo/address.proto", ADDRESS), ("crm/customer.proto", CUSTOMER)])
    assert order.full_name == "shop.Order"
    assert to_spark_type(order) == EXPECTED


def test_base64_descriptors_and_mixed_forms() -> None:
    address = _base64(ADDRESS, "geo/address.proto", [])
    customer = _base64(CUSTOMER, "crm/customer.proto", [("geo/address.proto", ADDRESS)])
    order = _base64(
        ORDER,
        "shop/order.proto",
        [("geo/address.proto", ADDRESS), ("crm/customer.proto", CUSTOMER)],
    )
    deps = [("geo/address.proto", address), ("crm/customer.proto", customer)]
    assert to_spark_type(_order(deps, order)) == EXPECTED
    # text importing a base64 file, and base64 importing a text file
    mixed = [("geo/address.proto", address), ("crm/customer.proto", CUSTOMER)]
    assert to_spark_type(_order(mixed)) == EXPECTED
    mixed = [("geo/address.proto", ADDRESS), ("crm/customer.proto", customer)]
    assert to_spark_type(_order(mixed)) == EXPECTED


def test_an_import_without_a_reference_names_the_import() -> None:
    with pytest.raises(ConfigurationError, match=r"crm/customer\.proto") as info:
        file_descriptor(
            _base64(
                ORDER, "o.proto", [("geo/address.proto", ADDRESS), ("crm/customer.proto", CUSTOMER)]
            )
        )
    assert "schema reference for each imported Protobuf file" in str(info.value)
