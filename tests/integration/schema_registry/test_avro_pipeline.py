"""examples/avro_pipeline.py end to end: an Avro topic written by confluent-kafka's serializer in
two schema versions → kafka_direct read + from_avro → to_avro + kafka_direct write → read back
by confluent-kafka's deserializer. Test broker, real registry, real local Spark."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "avro_pipeline.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("avro_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_avro_pipeline_turns_every_order_into_its_total(
    spark: Any, kafka_bootstrap: str, registry_url: str, make_topic: Callable[..., str]
) -> None:
    example = _load()
    source, target = make_topic(prefix="orders"), make_topic(prefix="totals")
    assert example.produce_orders(kafka_bootstrap, registry_url, source) == 5
    example.run_pipeline(spark, kafka_bootstrap, registry_url, source, target)
    totals = example.read_totals(kafka_bootstrap, registry_url, target, expected=5)
    assert totals == [
        {"id": 1, "customer": "c1", "items": 1, "total": Decimal("2.50"), "currency": "EUR"},
        {"id": 2, "customer": "c0", "items": 3, "total": Decimal("12.50"), "currency": "EUR"},
        {"id": 3, "customer": "c1", "items": 6, "total": Decimal("35.00"), "currency": "EUR"},
        {"id": 4, "customer": "c0", "items": 10, "total": Decimal("75.00"), "currency": "USD"},
        {"id": 5, "customer": "c1", "items": 15, "total": Decimal("137.50"), "currency": "USD"},
    ]
