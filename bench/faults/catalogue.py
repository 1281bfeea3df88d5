"""Every fault scenario by the name ``--only`` takes, in the order the suite runs them."""

from __future__ import annotations

from bench.faults import attacks, clocks, disk, failover, promises, scenarios

SCENARIOS: dict[str, scenarios.Scenario] = {
    **scenarios.SCENARIOS,
    **failover.SCENARIOS,
    **promises.SCENARIOS,
    **attacks.SCENARIOS,
    **disk.SCENARIOS,
    **clocks.SCENARIOS,
}
