"""A Kafka client properties file, as Kafka's own tools take it with ``--command-config``: Java's
``.properties`` format, parsed here, then judged and translated like a Spark job's ``kafka.*``
options (:func:`kafka_direct.config.reader.kafka_params`: a JAAS line and JKS stores become
librdkafka's settings). Pure: plain library (no Spark, no Kafka client), used by the CLI in the
user's process.

The format is ``java.util.Properties.load``'s: ``key=value``, ``key: value`` or ``key value``;
``#`` and ``!`` start a comment line; blank lines are skipped; a line ending in an odd number of
backslashes continues on the next (its leading blanks dropped); ``\\t``, ``\\n``, ``\\r``,
``\\f``, ``\\uXXXX`` and ``\\<any>`` are escapes, in keys and values alike. A key given twice
keeps its last value, as in Java.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.reader import kafka_params
from kafka_direct.errors import ConfigurationError

__all__ = ["client_properties", "parse_properties"]

_BLANKS = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Java's logical lines: comments and blank lines dropped, continuations joined."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(_BLANKS)
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigurationError(
                    "--command-config", where, "\\u followed by four hex digits",
                    "Fix the escape in the properties file (Java's Properties format).",
                )  # fmt: skip
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """A logical line's key and value (raw, escapes still in)."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in _SEPARATORS or ch in _BLANKS:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_BLANKS)
    if rest[:1] in (_SEPARATORS[0], _SEPARATORS[1]):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def parse_properties(text: str, *, source: str = "the properties file") -> dict[str, str]:
    """The keys and values of a Java ``.properties`` text (module docstring)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        # The line's position is no secret; its text may be (a JAAS line with a password).
        props[_unescape(key, source)] = _unescape(value, source)
    return props


def client_properties(
    text: str, *, source: str, bootstrap_servers: str | None = None
) -> KafkaConfig:
    """librdkafka's client settings from a ``--command-config`` file's ``text``: parsed,
    judged and translated as the source's ``kafka.*`` options are (names without the prefix).
    ``bootstrap_servers`` (the command's ``--bootstrap-servers``) wins over the file's."""
    params: Mapping[str, str] = parse_properties(text, source=source)
    if bootstrap_servers:
        params = {**params, "bootstrap.servers": bootstrap_servers}
    return kafka_params(
        params,
        owned={},
        owner="command",
        prefix="",
        bootstrap_fix=f"Pass --bootstrap-servers, or set bootstrap.servers in {source}.",
    )
