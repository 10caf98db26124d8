"""What the fastavro path of Avro decoding changes in fastavro's values, so that they are
spark-avro's (and the C decoder's). Pure: plain library; runs where Avro is decoded (Spark's
Python workers, the driver for schemas).

- A decimal of no bytes is refused (:func:`parse_strict`), where fastavro reads it as 0.
- An int and long union is Spark's long holding the number as written, where fastavro turns a
  logical type into a date, time or datetime (:func:`number_converter`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import fastavro
from fastavro.read import LOGICAL_READERS

__all__ = ["number_converter", "parse_strict"]

Converter = Callable[[Any], Any]

#: fastavro reads an Avro decimal of no bytes as 0, where Java's Avro (a BigInteger of no
#: bytes), and so spark-avro, and the C decoder refuse it: no silently made-up value. The fastavro
#: path parses its schemas with their decimals' logical type renamed to this one, whose reader is
#: fastavro's own but refuses no bytes (a name of ours: fastavro's "decimal" is left as it is for
#: everyone else in the process).
_STRICT_DECIMAL = "kafka-direct-decimal"
_read_decimal = LOGICAL_READERS["bytes-decimal"]


def _read_strict_decimal(data: bytes, writer: Any = None, reader: Any = None) -> Any:
    if not data:  # a ValueError: the record's error, which names the record in FAILFAST mode
        raise ValueError("a decimal of no bytes, which Java's Avro refuses (no digits)")
    return _read_decimal(data, writer, reader)


LOGICAL_READERS[f"bytes-{_STRICT_DECIMAL}"] = _read_strict_decimal
LOGICAL_READERS[f"fixed-{_STRICT_DECIMAL}"] = _read_strict_decimal


def _strict_decimal(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("logicalType") == "decimal" and schema.get("type") in ("bytes", "fixed"):
        return {**schema, "logicalType": _STRICT_DECIMAL}
    return schema


def parse_strict(text: str) -> Any:
    """fastavro's parsed schema of an Avro schema's JSON, its decimals strict (above)."""
    fastavro.parse_schema(json.loads(text))  # fastavro's checks of a decimal's attributes
    return fastavro.parse_schema(json.loads(text, object_hook=_strict_decimal))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_LOCAL_EPOCH = datetime.datetime(1970, 1, 1)
_DAY_ZERO = datetime.date(1970, 1, 1)
_MILLI = datetime.timedelta(milliseconds=1)
_MICRO = datetime.timedelta(microseconds=1)


def _since_epoch(value: datetime.datetime) -> datetime.timedelta:
    return value - (_EPOCH if value.tzinfo is not None else _LOCAL_EPOCH)


def _micros_of_day(value: datetime.time) -> int:
    return (value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000 + value.microsecond


#: fastavro's value of an int or long logical type (its Python type first) -> the number written.
_WRITTEN_NUMBER: dict[str, tuple[type, Converter]] = {
    "date": (datetime.date, lambda v: (v - _DAY_ZERO).days),
    "time-millis": (datetime.time, lambda v: _micros_of_day(v) // 1000),
    "time-micros": (datetime.time, _micros_of_day),
    "timestamp-millis": (datetime.datetime, lambda v: _since_epoch(v) // _MILLI),
    "timestamp-micros": (datetime.datetime, lambda v: _since_epoch(v) // _MICRO),
    "local-timestamp-millis": (datetime.datetime, lambda v: _since_epoch(v) // _MILLI),
    "local-timestamp-micros": (datetime.datetime, lambda v: _since_epoch(v) // _MICRO),
}


def number_converter(branches: list[Any]) -> Converter | None:
    """An int and a long branch: Spark's long. spark-avro takes the number written whatever
    the branch's logical type (Java's Avro converts none), where fastavro gives a date, time or
    datetime: this turns it back. None when neither branch has such a logical type."""
    found = [
        _WRITTEN_NUMBER[b["logicalType"]]
        for b in branches
        if isinstance(b, dict) and b.get("logicalType") in _WRITTEN_NUMBER
    ]
    if not found:
        return None
    # datetime before date: a datetime is a date too
    found.sort(key=lambda pair: pair[0] is not datetime.datetime)
    ambiguous = len(found) == 2 and found[0][0] is found[1][0]  # time-millis and time-micros

    def number(value: Any) -> Any:
        if value is None or isinstance(value, int):
            return value
        for kind, convert in found:
            if isinstance(value, kind):
                if ambiguous:  # either branch's, in different units: refused, not guessed
                    raise ValueError("a time of a union of time-millis and time-micros")
                return convert(value)
        raise ValueError(f"{type(value).__name__} value for an int/long union")

    return number
