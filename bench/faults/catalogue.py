"""Every fault scenario by the name ``--only`` takes, in the order the suite runs them."""

from __future__ import annotations

from bench.faults import clocks, scenarios

SCENARIOS: dict[str, scenarios.Scenario] = {**scenarios.SCENARIOS, **clocks.SCENARIOS}
