"""What Kafka's authorizer refused, said with the principal and the grant that fixes it. Runs in
every process that talks to Kafka (the driver's checks, executors' tasks).

Kafka leaves out of its answers what a principal may not DESCRIBE, so a topic without rights
looks like no topic at all. Where Kafka does say so (a request that names the topic), the error
names the principal as the broker sees it (from the client's own settings: never a secret), the
operation, the resources and a ``kafka-acls`` line that grants them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafka_direct.errors import KafkaClientError

__all__ = ["describe_principal", "not_authorized"]


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


def not_authorized(
    config: Mapping[str, str], operation: str, resource: str, names: Sequence[str]
) -> KafkaClientError:
    """The error for ``operation`` refused on ``resource`` (topic, group, transactional id)."""
    principal, how = describe_principal(config)
    listed = ", ".join(f"'{n}'" for n in names)
    code = f"{resource.upper().replace(' ', '_')}_AUTHORIZATION_FAILED"
    ops = " ".join(f"--operation {op}" for op in operation.split())
    flag = {"topic": "--topic", "group": "--group", "transactional id": "--transactional-id"}
    grants = " ".join(f"{flag.get(resource, '--topic')} {n}" for n in names)
    hidden = (
        " Kafka answers the same for a topic that does not exist, so either the principal may "
        "not see it or it is not there."
        if resource == "topic"
        else ""
    )
    return KafkaClientError(
        f"Not authorized ({code}): Kafka refused {' and '.join(operation.split())} on "
        f"{resource} {listed} to principal {principal}, who connects with {how} to "
        f"{config.get('bootstrap.servers')!r}.{hidden} "
        f"Grant it, for example: kafka-acls.sh --add --allow-principal {principal} {ops} "
        f"{grants}.",
        code=code,
        retriable=False,
    )
