"""How long an evaluated exchange is kept: score bands read from ``config/retention.toml``."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_DURATION = re.compile(r"^\s*(\d+)\s*([dhwm]|min)?\s*$")
_UNIT = {
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "w": timedelta(weeks=1),
    "min": timedelta(minutes=1),
    "m": timedelta(days=30),
}


@dataclass(frozen=True)
class RetentionBand:
    """Scores ``low..high`` (inclusive) are kept for ``keep``; ``None`` means forever."""

    name: str
    low: int
    high: int
    keep: timedelta | None

    @property
    def kept(self) -> bool:
        return self.keep is None or self.keep > timedelta(0)


@dataclass(frozen=True)
class RetentionPolicy:
    bands: tuple[RetentionBand, ...]

    def band_for(self, score: int) -> RetentionBand:
        for band in self.bands:
            if band.low <= score <= band.high:
                return band
        raise ValueError(f"score {score} is outside 0..100")

    def expires_at(self, score: int, now: datetime) -> datetime | None:
        """When an exchange scored ``score`` at ``now`` expires (``None``: never).

        A "not kept" band expires at ``now``: the turns leave recall at once.
        """
        keep = self.band_for(score).keep
        return None if keep is None else now + keep

    @property
    def band_names(self) -> tuple[str, ...]:
        return tuple(band.name for band in self.bands)


def parse_duration(text: str) -> timedelta | None:
    """``"forever"`` -> None; ``"0"``, ``"12h"``, ``"1d"``, ``"2w"``, ``"1m"`` (30 days)."""
    if text.strip().lower() == "forever":
        return None
    match = _DURATION.match(text.lower())
    if not match:
        raise ConfigError(f"retention keep {text!r} is not a duration like 1d, 12h or forever")
    number, unit = int(match.group(1)), match.group(2) or "d"
    return number * _UNIT[unit]


def policy_from_bands(raw_bands: Sequence[dict[str, Any]]) -> RetentionPolicy:
    """Validate bands: names unique, covering 0..100 with no gap or overlap."""
    try:
        bands = sorted(
            (
                RetentionBand(
                    str(b["name"]), int(b["min"]), int(b["max"]), parse_duration(str(b["keep"]))
                )
                for b in raw_bands
            ),
            key=lambda band: band.low,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"each retention band needs name, min, max and keep: {exc}") from exc
    expected = 0
    for band in bands:
        if band.low != expected or band.high < band.low:
            raise ConfigError(
                f"retention bands must cover 0..100 without gaps or overlaps; band "
                f"{band.name!r} starts at {band.low}, expected {expected}"
            )
        expected = band.high + 1
    if expected != 101:
        raise ConfigError("retention bands must end at 100")
    if len({band.name for band in bands}) != len(bands):
        raise ConfigError("retention band names must be unique")
    return RetentionPolicy(tuple(bands))


def load_retention_policy(path: Path) -> RetentionPolicy:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the retention file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the retention file {path} is not valid TOML: {exc}") from exc
    return policy_from_bands(data.get("band", []))
