"""Build of the optional C fast paths (everything else is in pyproject.toml).

- ``kafka_direct.consumer._rdkafka_arrow`` reads librdkafka straight into Arrow buffers;
- ``kafka_direct.producer._rdkafka_produce`` produces straight from Arrow buffers into librdkafka;
- ``kafka_direct.schema_registry._avro_arrow`` decodes Avro records straight into Arrow buffers;
- ``kafka_direct.schema_registry._avro_encode`` encodes Arrow buffers straight into Avro records.

They need only a C compiler and Python's headers: librdkafka is resolved at run time from the
copy confluent-kafka loads. The code both need (librdkafka's ABI and its loading, error events
and log lines) is in ``src/kafka_direct/_native/`` and compiled into each from the same source
files. ``optional=True``: without a compiler the package still installs, and reads and writes
through confluent-kafka's Python objects instead (``kafka_direct.consumer.native.status()`` and
``kafka_direct.producer.native.status()`` say which).
"""

from setuptools import Extension, setup

SHARED = "src/kafka_direct/_native"
AVRO = "src/kafka_direct/schema_registry/_native"
SHARED_SOURCES = [f"{SHARED}/_rdkafka_abi.c", f"{SHARED}/_client_events.c"]
# Hidden: only PyInit is exported, so each extension's copy of the shared code stays its own.
COMPILE_ARGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-braces", "-fvisibility=hidden"]


def extension(name: str, folder: str, sources: list[str], header: str) -> Extension:
    return Extension(
        name,
        sources=[f"{folder}/{s}" for s in sources] + SHARED_SOURCES,
        depends=[f"{folder}/{header}", f"{SHARED}/_rdkafka_abi.h"],
        include_dirs=[SHARED],
        extra_compile_args=COMPILE_ARGS,
        libraries=["dl", "pthread"],
        optional=True,
    )


setup(
    ext_modules=[
        extension(
            "kafka_direct.consumer._rdkafka_arrow",
            "src/kafka_direct/consumer/_native",
            [
                "_rdkafka_arrow.c",
                "_rdkafka_consume.c",
                "_rdkafka_consume_many.c",
                "_arrow_columns.c",
            ],
            "_rdkafka_arrow.h",
        ),
        extension(
            "kafka_direct.producer._rdkafka_produce",
            "src/kafka_direct/producer/_native",
            ["_rdkafka_produce.c", "_produce_loop.c"],
            "_rdkafka_produce.h",
        ),
        # from_avro's decoder: Avro -> Arrow buffers; needs neither librdkafka nor the shared code.
        Extension(
            "kafka_direct.schema_registry._avro_arrow",
            sources=[
                f"{AVRO}/_avro_arrow.c",
                f"{AVRO}/_avro_decode.c",
                f"{AVRO}/_avro_builders.c",
            ],
            depends=[
                f"{AVRO}/_avro_arrow.h",
                f"{AVRO}/_avro_decode.h",
                f"{AVRO}/_arrow_batch.h",
                f"{AVRO}/_utf8.h",
            ],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        # from_protobuf's decoder: Protobuf -> Arrow buffers, with the Avro decoder's builders.
        Extension(
            "kafka_direct.schema_registry._protobuf_arrow",
            sources=[
                f"{AVRO}/_protobuf_arrow.c",
                f"{AVRO}/_protobuf_decode.c",
                f"{AVRO}/_avro_builders.c",
            ],
            depends=[
                f"{AVRO}/_avro_arrow.h",
                f"{AVRO}/_protobuf_decode.h",
                f"{AVRO}/_arrow_batch.h",
                f"{AVRO}/_utf8.h",
            ],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        # The exactly-once sink's order-insensitive row digest (producer/digest.py has the
        # BLAKE2b scheme in Python for builds without a C compiler; xxhash.h is xxHash 0.8.1,
        # BSD 2-Clause, header only).
        Extension(
            "kafka_direct.producer._row_digest",
            sources=["src/kafka_direct/producer/_native/_row_digest.c"],
            depends=[f"{SHARED}/xxhash.h"],
            include_dirs=[SHARED],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
        # to_avro's encoder: Arrow buffers -> Avro; needs neither librdkafka nor the shared code.
        Extension(
            "kafka_direct.schema_registry._avro_encode",
            sources=[f"{AVRO}/_avro_encode.c", f"{AVRO}/_avro_encode_values.c"],
            depends=[f"{AVRO}/_avro_encode.h", f"{AVRO}/_utf8.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        ),
    ]
)
