"""Share groups (KIP-932) seen from the admin API: a group's settings that a share stream depends
on, read at start, and a way to set them. Runs in the Spark driver (the user's process).

In a share group the settings that decide delivery are not client settings but group configs,
kept by the broker: ``share.record.lock.duration.ms`` (how long an acquired record stays with
its consumer), ``share.delivery.count.limit`` (after that many deliveries the broker archives a
record on its own) and ``share.auto.offset.reset`` (where a new group starts: ``latest`` by
default). A group without its own value takes the broker's ``group.share.*`` default, which is
what ``describe_configs`` on the GROUP resource reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from kafka_direct.kafka.admin import new_admin_client
from kafka_direct.kafka.translate import kafka_errors

__all__ = ["ShareGroupSettings", "alter_share_group_config", "share_group_settings"]

_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ShareGroupSettings:
    """The group configs a share stream depends on, as the broker reports them."""

    lock_duration_ms: int
    delivery_count_limit: int
    auto_offset_reset: str


def share_group_settings(kafka: Mapping[str, str], group: str) -> ShareGroupSettings:
    """The group's lock duration, delivery limit and reset policy (its own, else the broker's)."""
    admin = new_admin_client(kafka)
    resource = ConfigResource("GROUP", group)
    with kafka_errors(f"Reading the configs of share group '{group}'"):
        entries = admin.describe_configs([resource], request_timeout=_TIMEOUT_S)[resource].result(
            _TIMEOUT_S
        )
    values = {name: entry.value for name, entry in entries.items()}
    return ShareGroupSettings(
        lock_duration_ms=int(values.get("share.record.lock.duration.ms") or 30_000),
        delivery_count_limit=int(values.get("share.delivery.count.limit") or 5),
        auto_offset_reset=str(values.get("share.auto.offset.reset") or "latest"),
    )


def alter_share_group_config(
    kafka: Mapping[str, str], group: str, configs: Mapping[str, str]
) -> None:
    """Set group configs (``incrementalAlterConfigs`` on the GROUP resource), for example
    ``{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"}``.
    Needs ALTER_CONFIGS on the group; the same as ``kafka-configs --entity-type groups``."""
    admin = new_admin_client(kafka)
    resource = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    with kafka_errors(f"Altering the configs of share group '{group}'"):
        admin.incremental_alter_configs([resource], request_timeout=_TIMEOUT_S)[resource].result(
            _TIMEOUT_S
        )
