"""Message classes for the Protobuf tests, generated from ``.proto`` text by protoc
(grpcio-tools) as a user's build would, each set in a descriptor pool of its own: two versions
of one message can then live in one test process."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def message_classes(files: dict[str, str]) -> dict[str, Any]:
    """``{file name: .proto text}`` → ``{message full name: class}`` for every message."""
    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in files.items():
            (Path(scratch) / name).write_text(text)
        target = Path(scratch) / "set.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{scratch}",
                f"-I{include}",
                "--include_imports",
                f"--descriptor_set_out={target}",
                *files,
            ],
            check=True,
            timeout=120,
        )
        compiled = descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in compiled.file:
        pool.AddSerializedFile(proto.SerializeToString())
    classes = {}
    for proto in compiled.file:
        for message in pool.FindFileByName(proto.name).message_types_by_name.values():
            classes[message.full_name] = message_factory.GetMessageClass(message)
    return classes
