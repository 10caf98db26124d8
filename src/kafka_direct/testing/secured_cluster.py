"""A real Apache Kafka cluster with TLS, SASL and ACLs, for tests of secured clients. Runs in the
user's (or the test suite's) process, like
:class:`~kafka_direct.testing.kafka_cluster.KafkaCluster`, which it extends.

Every node keeps its PLAINTEXT listener (between brokers, and the kit's own admin path, whose
principal ``User:ANONYMOUS`` is a super user) and adds client listeners::

    with SecuredKafkaCluster(users={"alice": "alice-secret"}) as cluster:
        cluster.bootstrap("SASL_PLAINTEXT")     # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
        cluster.bootstrap("SASL_SSL")           # the same over TLS
        cluster.bootstrap("SSL")                # TLS; client certificates as ``client_auth`` says
        cluster.grant("User:alice", "topic", "orders", "READ", "DESCRIBE")
        cluster.truststore("JKS", "changeit")   # the CA as a JKS truststore (the JDK's keytool)

- **SASL.** PLAIN users are the ``users`` given (fixed when the brokers start); every one of them
  is also a SCRAM-SHA-256 and SCRAM-SHA-512 user (created through the admin API once the
  cluster runs), and :meth:`add_user` adds more.
- **TLS.** The kit's CA (:mod:`~kafka_direct.testing.certificates`) signs a certificate for
  127.0.0.1; :attr:`ca_pem` is its certificate. ``client_auth`` is Kafka's ``ssl.client.auth``
  (``none``, ``requested``, ``required``); :meth:`client_certificate` issues one.
- **OAUTHBEARER** (``oauth=True``, or ``oauth_clients``). The kit runs an OpenID Connect
  provider (:class:`~kafka_direct.testing.oidc.OidcProvider`, :attr:`oidc`): a JWKS and a
  client-credentials token endpoint. Both SASL listeners take OAUTHBEARER too, validated by the
  broker itself (``OAuthBearerValidatorCallbackHandler`` against the JWKS, the issuer and the
  audience). A client's principal is ``User:<client id>``. Kafka 4 fetches only URLs listed in
  the JVM's ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, which the kit sets.
- **ACLs.** ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal
  may do only what :meth:`grant` allowed. ``User:ANONYMOUS`` (the PLAINTEXT and controller
  listeners) and ``User:admin`` are super users.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_direct.testing.certificates import (
    CertificateAuthority,
    write_ca,
    write_client_certificate,
    write_server_certificate,
)
from kafka_direct.testing.kafka_cluster import KafkaCluster, KafkaClusterError, _Node
from kafka_direct.testing.oidc import OidcProvider
from kafka_direct.testing.ports import free_port

__all__ = ["PROTOCOLS", "SecuredKafkaCluster"]

PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL", "SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
OAUTH_MECHANISM = "OAUTHBEARER"
#: Kafka's own OIDC validator: JWKS signature, expiry, issuer and audience.
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTH_JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"
SUPER_USER = "admin"
_STORE_PASSWORD = "kafka-direct-test-store"


def _jaas_plain(users: Mapping[str, str]) -> str:
    accounts = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    admin = users[SUPER_USER]
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{SUPER_USER}" password="{admin}" {accounts};'
    )


class SecuredKafkaCluster(KafkaCluster):
    """:class:`KafkaCluster` with SASL_PLAINTEXT, SASL_SSL and SSL listeners and an authorizer
    (module docstring)."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        users: Mapping[str, str] | None = None,
        client_auth: str = "none",
        authorizer: bool = True,
        oauth: bool = False,
        oauth_clients: Mapping[str, str] | None = None,
        oauth_lifetimes: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(brokers, **kwargs)
        #: The OIDC provider of OAUTHBEARER (``oauth``): its clients are ``oauth_clients``
        #: (id to secret), ``oauth_lifetimes`` gives a client's tokens a life of their own.
        self.oidc: OidcProvider | None = None
        if oauth or oauth_clients:
            self.oidc = OidcProvider(oauth_clients or {}, lifetimes=oauth_lifetimes)
        self.users = {SUPER_USER: "admin-secret", **dict(users or {})}
        self.client_auth = client_auth
        self.authorizer = authorizer
        self._ports: dict[int, dict[str, int]] = {}
        self._ca: CertificateAuthority | None = None
        self._tls_dir: Path | None = None

    # ------------------------------------------------------------------------------ addresses
    def bootstrap(self, protocol: str) -> str:
        """The bootstrap servers of the ``protocol`` listeners (one of :data:`PROTOCOLS`)."""
        if protocol not in PROTOCOLS:
            raise KafkaClusterError(f"bootstrap({protocol!r}): expected one of {PROTOCOLS}.")
        if not self._ports:
            raise KafkaClusterError("The Kafka cluster is not started: call start() first.")
        return ",".join(f"127.0.0.1:{p[protocol]}" for p in self._ports.values())

    @property
    def ca_pem(self) -> Path:
        """The CA certificate (PEM) that signed the brokers' certificates."""
        if self._ca is None:
            raise KafkaClusterError("The Kafka cluster is not started: call start() first.")
        return self._ca.certificate

    def client_certificate(
        self, common_name: str, password: str | None = None
    ) -> tuple[Path, Path]:
        """A client certificate and key (PEM) for ``common_name``, signed by the cluster's CA:
        its principal is ``User:CN=<common_name>``."""
        assert self._ca is not None and self._tls_dir is not None
        return write_client_certificate(
            self._tls_dir, self._ca, common_name, password=password, stem=f"client-{common_name}"
        )

    def truststore(self, kind: str = "JKS", password: str = "changeit") -> Path:
        """The CA as a truststore of ``kind`` (``JKS`` or ``PKCS12``), made with the JDK's
        keytool, as a Java client's ``ssl.truststore.location``."""
        assert self._tls_dir is not None
        path = self._tls_dir / f"truststore-{kind.lower()}-{password}.{kind.lower()}"
        if not path.exists():
            keytool = Path(self._java).with_name("keytool")
            env = dict(os.environ, KD_STOREPASS=password)
            subprocess.run(
                [str(keytool), "-importcert", "-noprompt", "-alias", "ca", "-file",
                 str(self.ca_pem), "-keystore", str(path), "-storetype", kind,
                 "-storepass:env", "KD_STOREPASS"],
                env=env, check=True, capture_output=True,
            )  # fmt: skip
        return path

    # ------------------------------------------------------------------------------ users, ACLs
    def admin_config(self) -> dict[str, Any]:
        """Client settings of the kit's admin path (PLAINTEXT, a super user)."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def add_user(self, name: str, password: str) -> None:
        """A SCRAM-SHA-256 and SCRAM-SHA-512 user (PLAIN users are fixed at start)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient(self.admin_config())
        # One request per mechanism: Kafka refuses two changes of one user in one request.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion(
                name, ScramCredentialInfo(mechanism, 4096), password.encode()
            )
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(30)

    def grant(
        self, principal: str, resource: str, name: str, *operations: str, prefixed: bool = False
    ) -> None:
        """Allow ``principal`` (``User:alice``) ``operations`` (``READ``, ``WRITE``,
        ``DESCRIBE``...) on the ``resource`` (``topic``, ``group``, ``cluster``,
        ``transactional_id``) called ``name`` (a prefix with ``prefixed``)."""
        self._acls("create", principal, resource, name, operations, prefixed)

    def revoke(
        self, principal: str, resource: str, name: str, *operations: str, prefixed: bool = False
    ) -> None:
        """Take back what :meth:`grant` allowed."""
        self._acls("delete", principal, resource, name, operations, prefixed)

    def _acls(self, action: str, principal: str, resource: str, name: str,
              operations: tuple[str, ...], prefixed: bool) -> None:  # fmt: skip
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        kind = ResourceType[resource.upper()]
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        admin = AdminClient(self.admin_config())
        futures: Mapping[Any, Any]
        if action == "create":
            bindings = [
                AclBinding(kind, name, pattern, principal, "*", AclOperation[op.upper()],
                           AclPermissionType.ALLOW)
                for op in operations
            ]  # fmt: skip
            futures = admin.create_acls(bindings)
        else:
            filters = [
                AclBindingFilter(kind, name, pattern, principal, "*", AclOperation[op.upper()],
                                 AclPermissionType.ALLOW)
                for op in operations
            ]  # fmt: skip
            futures = admin.delete_acls(filters)
        for future in futures.values():
            future.result(30)

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> SecuredKafkaCluster:
        if self.oidc is not None:
            self.oidc.start()  # its URLs go into the brokers' properties
        super().start()  # a failed start stops the provider too (stop())
        for name, password in self.users.items():
            self.add_user(name, password)
        return self

    def stop(self, keep_logs: bool = False) -> None:
        super().stop(keep_logs)
        if self.oidc is not None:
            self.oidc.stop()

    def _java_command(self, node: _Node, main: list[str], heap_mb: int) -> list[str]:
        command = super()._java_command(node, main, heap_mb)
        if self.oidc is not None:
            # Kafka 4 fetches a JWKS (or a token) only from the URLs this property allows.
            allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oidc.jwks_url}"
            command.insert(1, allowed)
        return command

    def _create_nodes(self) -> None:
        super()._create_nodes()
        assert self._root is not None
        self._tls_dir = self._root / "tls"
        self._tls_dir.mkdir()
        self._ca = write_ca(self._tls_dir)
        cert, key = write_server_certificate(self._tls_dir, self._ca, "127.0.0.1")
        keystore = self._tls_dir / "server.p12"
        _write_pkcs12(keystore, cert, key, _STORE_PASSWORD)
        taken = {n.port for n in self._nodes.values()} | {
            n.controller_port for n in self._nodes.values()
        }
        for node in self._nodes.values():
            ports = {protocol: free_port(taken=taken) for protocol in PROTOCOLS}
            taken |= set(ports.values())
            self._ports[node.node_id] = ports
            extra = self._properties(node.port, node.controller_port, ports, keystore)
            path = node.directory / "server.properties"
            # Java's Properties: a key given again later wins.
            path.write_text(path.read_text() + extra)

    def _properties(self, port: int, controller_port: int, ports: Mapping[str, int],
                    keystore: Path) -> str:  # fmt: skip
        listeners = [f"PLAINTEXT://127.0.0.1:{port}"] + [
            f"{protocol}://127.0.0.1:{p}" for protocol, p in ports.items()
        ]
        props = {
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"] + [f"{p}:{p}" for p in PROTOCOLS]
            ),
            "sasl.enabled.mechanisms": ",".join(
                [*MECHANISMS, OAUTH_MECHANISM] if self.oidc else MECHANISMS
            ),
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": _STORE_PASSWORD,
            "ssl.truststore.location": str(self.ca_pem),
            "ssl.truststore.type": "PEM",
            "ssl.client.auth": self.client_auth,
            # Clients connect to 127.0.0.1, which the certificate names.
            "ssl.endpoint.identification.algorithm": "https",
        }
        for listener in ("sasl_plaintext", "sasl_ssl"):
            props[f"listener.name.{listener}.plain.sasl.jaas.config"] = _jaas_plain(self.users)
            for mechanism in ("scram-sha-256", "scram-sha-512"):
                props[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        if self.oidc is not None:
            props.update(
                {
                    "sasl.oauthbearer.jwks.endpoint.url": self.oidc.jwks_url,
                    "sasl.oauthbearer.expected.issuer": self.oidc.issuer,
                    "sasl.oauthbearer.expected.audience": self.oidc.audience,
                    # Kafka 4.1's handler builds its default validator without the JWKS and
                    # then checks no signature (seen on 4.1.1: a token signed by another key
                    # was let in); the broker's validator, named, fetches the JWKS and checks
                    # it. Kafka 3.9 has no such setting and checks signatures by itself.
                    "sasl.oauthbearer.jwt.validator.class": OAUTH_JWT_VALIDATOR,
                }
            )
            for listener in ("sasl_plaintext", "sasl_ssl"):
                props[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                )
                handler = f"listener.name.{listener}.oauthbearer.sasl.server.callback.handler.class"
                props[handler] = OAUTH_VALIDATOR
        if self.authorizer:
            props.update(
                {
                    "authorizer.class.name": (
                        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                    ),
                    "allow.everyone.if.no.acl.found": "false",
                    "super.users": f"User:ANONYMOUS;User:{SUPER_USER}",
                }
            )
        return "".join(f"{k}={v}\n" for k, v in props.items())


def _write_pkcs12(path: Path, cert: Path, key: Path, password: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server", private, certificate, None,  # type: ignore[arg-type]
            serialization.BestAvailableEncryption(password.encode()),
        )
    )  # fmt: skip
