"""What Kafka's authorizer refused, said with the principal and the grant that fixes it. Runs in
every process that talks to Kafka (the driver's checks, executors' tasks, the CLI). Pure: no
Spark, no confluent-kafka (error codes arrive as librdkafka's names).

Kafka leaves out of its answers what a principal may not DESCRIBE, so a topic without rights
looks like no topic at all. Where Kafka does say so (a request that names the topic, group or
transactional id), the error names the principal as the broker sees it (from the client's own
settings: never a secret), the operation, the resources and a ``kafka-acls`` line that grants
them. :class:`Access` says what a client was doing, so that the one translator
(:func:`kafka_direct.kafka.translate.translate`) can say the same when librdkafka reports
``*_AUTHORIZATION_FAILED`` in the middle of a task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafka_direct.errors import NotAuthorizedError

__all__ = [
    "DENIED_CODES",
    "Access",
    "describe_principal",
    "missing_operations",
    "not_authorized",
]

#: librdkafka's authorization codes and the kind of resource each refers to.
DENIED_CODES = {
    "TOPIC_AUTHORIZATION_FAILED": "topic",
    "GROUP_AUTHORIZATION_FAILED": "group",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "transactional id",
    "CLUSTER_AUTHORIZATION_FAILED": "cluster",
}

#: Kafka's ACL implications: an operation also allows these (and ALL allows everything).
_IMPLIES = {
    "DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"},
    "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"},
}

_FLAGS = {
    "topic": "--topic",
    "group": "--group",
    "transactional id": "--transactional-id",
    "cluster": "--cluster",
}


def describe_principal(config: Mapping[str, str]) -> tuple[str, str]:
    """(the principal for kafka-acls, how the client authenticates) from its settings."""
    protocol = config.get("security.protocol", "plaintext").upper()
    if protocol.startswith("SASL"):
        mechanism = (
            config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI"
        ).upper()
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            user = config.get("sasl.username", "?")
            return f"User:{user}", f"SASL {mechanism} as '{user}' over {protocol}"
        if mechanism == "OAUTHBEARER":
            client = config.get("sasl.oauthbearer.client.id")
            how = f"OAUTHBEARER (client id '{client}')" if client else "OAUTHBEARER"
            return "User:<the token's subject>", f"{how} over {protocol}"
        principal = config.get("sasl.kerberos.principal", "<the Kerberos principal>")
        return f"User:{principal}", f"SASL {mechanism} over {protocol}"
    if protocol == "SSL" and any(
        config.get(k)
        for k in ("ssl.certificate.location", "ssl.certificate.pem", "ssl.keystore.location")
    ):
        return "User:<the client certificate's subject>", "a TLS client certificate"
    return "User:ANONYMOUS", f"no authentication ({protocol})"


def missing_operations(granted: Sequence[str] | None, needed: Sequence[str]) -> list[str]:
    """The ``needed`` operations that ``granted`` (Kafka's ``authorized_operations`` names)
    does not allow, with Kafka's implications. ``granted=None`` (the broker did not say) misses
    nothing: only the request itself can tell then."""
    if granted is None:
        return []
    have = {op.upper() for op in granted}
    if "ALL" in have:
        return []
    return [
        op
        for op in needed
        if op.upper() not in have and not (_IMPLIES.get(op.upper(), set()) & have)
    ]


def not_authorized(
    config: Mapping[str, str],
    operation: str,
    resource: str,
    names: Sequence[str],
    *,
    prefixed: bool = False,
    context: str | None = None,
) -> NotAuthorizedError:
    """The error for ``operation`` (``"DESCRIBE READ"``: one or more, space-separated) refused on
    ``resource`` (topic, group, transactional id, cluster) called ``names`` (prefixes with
    ``prefixed``); ``context`` says what was being done when a task met it."""
    principal, how = describe_principal(config)
    operations = operation.split()
    kind = f"{resource} prefix" if prefixed else resource
    listed = ", ".join(f"'{n}'" for n in names)
    code = f"{resource.upper().replace(' ', '_')}_AUTHORIZATION_FAILED"
    ops = " ".join(f"--operation {op}" for op in operations)
    flag = _FLAGS.get(resource, "--topic")
    grants = flag if resource == "cluster" else " ".join(f"{flag} {n}" for n in names)
    if prefixed:
        grants += " --resource-pattern-type prefixed"
    hidden = (
        " Kafka answers the same for a topic that does not exist, so either the principal may "
        "not see it or it is not there."
        if resource == "topic" and "DESCRIBE" in operations
        else ""
    )
    where = "the cluster" if resource == "cluster" else f"{kind} {listed}"
    doing = f"{context}: " if context else ""
    return NotAuthorizedError(
        f"Not authorized ({code}): {doing}Kafka refused {' and '.join(operations)} on {where} "
        f"to principal {principal}, who connects with {how} to "
        f"{config.get('bootstrap.servers')!r}.{hidden} "
        f"Grant it, for example: kafka-acls.sh --add --allow-principal {principal} {ops} "
        f"{grants}.",
        code=code,
        principal=principal,
        operations=operations,
        resource=resource,
        names=list(names),
    )


@dataclass(frozen=True)
class Access:
    """What a client does, so that an authorization code in the middle of a task can be said
    as :func:`not_authorized` says it: the client's settings (for the principal), the topics
    and what it does to them, its group, its transactional id prefix."""

    config: Mapping[str, str] = field(repr=False)
    topics: Sequence[str] = ()
    topic_operations: str = "DESCRIBE READ"
    group: str | None = None
    group_operations: str = "READ"
    transactional_prefix: str | None = None

    def refused(self, code: str, context: str) -> NotAuthorizedError:
        """The error for librdkafka's ``code``, one of :data:`DENIED_CODES`."""
        resource = DENIED_CODES.get(code)
        if resource == "topic":
            names = list(self.topics) or ["<the topic>"]
            return not_authorized(
                self.config, self.topic_operations, "topic", names, context=context
            )
        if resource == "group":
            return not_authorized(
                self.config, self.group_operations, "group", [self.group or "<the group>"],
                context=context,
            )  # fmt: skip
        if resource == "transactional id":
            return not_authorized(
                self.config, "WRITE DESCRIBE", "transactional id",
                [self.transactional_prefix or "<the transactional id>"],
                prefixed=self.transactional_prefix is not None, context=context,
            )  # fmt: skip
        # The cluster: the idempotent producer's InitProducerId. Kafka >= 3.0 also allows it to
        # a principal with WRITE on any topic (KIP-679), so WRITE on the topic fixes it too.
        return not_authorized(
            self.config, "IDEMPOTENT_WRITE", "cluster", ["kafka-cluster"], context=context
        )
