"""Trust levels, ordered ``member < trusted < anchor``."""

from __future__ import annotations

from enum import IntEnum

from hearthnet.errors import BadRequest


class Level(IntEnum):
    """A member's trust level; comparison follows the order of rights."""

    MEMBER = 1
    TRUSTED = 2
    ANCHOR = 3

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls[text.upper()]
        except (KeyError, AttributeError) as exc:
            raise BadRequest(f"unknown trust level {text!r}: use member, trusted or anchor") from exc

    @property
    def label(self) -> str:
        return self.name.lower()
