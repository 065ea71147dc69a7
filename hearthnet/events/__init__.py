"""The signed community event log: envelope, rules, durable log, gossip."""

from hearthnet.events.envelope import SCHEMA_VERSION, Event, replay_key, sign_event
from hearthnet.events.gossip import PullResult, lacking, parse_version_vector, pull
from hearthnet.events.log import EventLog, IngestReport
from hearthnet.events.rules import EventRule, EventRules, LogState, Rank, StateModel, require_fields
from hearthnet.events.ulid import is_ulid, new_ulid

__all__ = [
    "SCHEMA_VERSION",
    "Event",
    "EventLog",
    "EventRule",
    "EventRules",
    "IngestReport",
    "LogState",
    "PullResult",
    "Rank",
    "StateModel",
    "is_ulid",
    "lacking",
    "new_ulid",
    "parse_version_vector",
    "pull",
    "replay_key",
    "require_fields",
    "sign_event",
]
