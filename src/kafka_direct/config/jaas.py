"""A ``sasl.jaas.config`` line parsed as Kafka's Java client parses it (its ``JaasConfig``, on
Java's ``StreamTokenizer``): one login module, its control flag, its options with values bare or
quoted with ``"`` or ``'``, Java's escapes in quoted values, ``//`` and ``/* */`` comments.
Pure: plain library, used where options are parsed (the driver). Nothing parsed is ever shown:
a JAAS line holds the password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["JaasEntry", "parse_jaas"]

_FLAGS = ("required", "requisite", "sufficient", "optional")
#: Java's StreamTokenizer escapes in a quoted value (the tokenizer of Kafka's JaasConfig).
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_KEY = re.compile(r"[A-Za-z0-9_.\-$]+")
_BARE = re.compile(r"[^\s;\"']+")


class _JaasSyntaxError(ValueError):
    """Where a JAAS line stops parsing; never carries the line's text."""


def _skip(text: str, i: int) -> int:
    """Past whitespace and comments (``// ...`` to the line's end, ``/* ... */``), as Kafka's
    JaasConfig tokenizer skips them."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        else:
            break
    return i


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The value quoted at ``text[i]`` (``"`` or ``'``), unescaped as Java's StreamTokenizer
    does; and the index past its closing quote."""
    quote, out, i = text[i], [], i + 1
    while i < len(text) and text[i] != quote:
        char = text[i]
        if char in "\n\r":
            raise _JaasSyntaxError("a quoted value runs past the end of its line")
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            octal = re.match(r"[0-3][0-7]{0,2}|[4-7][0-7]?", text[i + 1 : i + 4])
            if octal:
                out.append(chr(int(octal.group(), 8)))
                i += 1 + len(octal.group())
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    if i >= len(text):
        raise _JaasSyntaxError("a quoted value has no closing quote")
    return "".join(out), i + 1


def _jaas_options(text: str) -> dict[str, str]:
    """``key=value`` pairs up to the closing ``;``: values quoted with ``"`` or ``'`` or bare."""
    options: dict[str, str] = {}
    i = _skip(text, 0)
    while i < len(text) and text[i] != ";":
        key = _KEY.match(text, i)
        if key is None:
            raise _JaasSyntaxError("an option has no name")
        i = _skip(text, key.end())
        if i >= len(text) or text[i] != "=":
            raise _JaasSyntaxError("an option has no '='")
        i = _skip(text, i + 1)
        if i < len(text) and text[i] in "\"'":
            value, i = _quoted(text, i)
        else:
            bare = _BARE.match(text, i)
            if bare is None:
                raise _JaasSyntaxError("an option has no value")
            value, i = bare.group(), bare.end()
        options[key.group()] = value
        i = _skip(text, i)
    if i >= len(text):
        return options  # Java wants the ';'; a line without it has always been taken here
    if _skip(text, i + 1) != len(text):
        raise _JaasSyntaxError("more follows the login module's ';'")
    return options


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a ``sasl.jaas.config`` line."""

    module: str
    #: Holds the password: never in a repr.
    options: Mapping[str, str] = field(repr=False)


def parse_jaas(text: str, option: str = "kafka.sasl.jaas.config") -> JaasEntry:
    """``Module required key="value" key=value;`` (what Kafka's Java client takes). The value
    is never shown in an error: a JAAS line holds the password."""
    body = text[_skip(text, 0) :].rstrip()
    match = re.match(r"([A-Za-z_$][\w.$]*)\s+(\w+)", body)
    if match is None or match.group(2).lower() not in _FLAGS:
        raise ConfigurationError(
            option,
            REDACTED,
            "'<LoginModule class> required key=\"value\" ...;'",
            "as Kafka's Java client takes it, for example org.apache.kafka.common.security."
            'plain.PlainLoginModule required username="u" password="p";',
        )
    try:
        options = _jaas_options(body[match.end() :])
    except _JaasSyntaxError as exc:
        raise ConfigurationError(
            option,
            REDACTED,
            "one login module, its options as key=value, key=\"value\" or key='value', "
            "ending with ';'",
            f"Kafka's clients take exactly one login module in sasl.jaas.config: {exc}.",
        ) from None
    return JaasEntry(match.group(1), options)
