"""Build of the optional C fast path (everything else is in pyproject.toml).

``kafka_direct._rdkafka_arrow`` reads librdkafka straight into Arrow buffers. It needs only a C
compiler and Python's headers: librdkafka is resolved at run time from the copy confluent-kafka
loads. ``optional=True``: without a compiler the package still installs, and reads through
confluent-kafka's Python messages instead (``kafka_direct.native.available()`` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_direct._rdkafka_arrow",
            sources=[
                "src/kafka_direct/_rdkafka_arrow.c",
                "src/kafka_direct/_rdkafka_consume.c",
                "src/kafka_direct/_arrow_columns.c",
                "src/kafka_direct/_rdkafka_abi.c",
            ],
            depends=["src/kafka_direct/_rdkafka_arrow.h"],
            # Hidden: only PyInit is exported, so the units' shared names cannot clash.
            extra_compile_args=[
                "-O2",
                "-std=c11",
                "-Wall",
                "-Wno-missing-braces",
                "-fvisibility=hidden",
            ],
            libraries=["dl", "pthread"],
            optional=True,
        )
    ]
)
