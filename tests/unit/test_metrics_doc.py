"""docs/METRICS.md stays true: every metric the exporter serves is in its table, and the
table names no metric the exporter does not serve."""

from __future__ import annotations

import json
import re

from paths import DATA, ROOT

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.present.metrics import fleet_families
from gpuroom.tui.rules.watch import FleetWatch


def test_the_metric_list_in_the_docs_is_the_exporters() -> None:
    fleet = StaticFleet.from_scenario(json.loads((DATA / "scenario-throttle.json").read_text()))
    hosts = fleet.hosts()
    for h in hosts:
        h.price_per_hour = 1.0
    now = max(h.last_ok or 0 for h in hosts) + 5
    watch = FleetWatch()
    for h in hosts:
        watch.observe(h, now)
    served = {(f.name, f.kind, ", ".join(f.labels)) for f in fleet_families(
        hosts, watch.findings(), watch.clocks(hosts, now), now, idle_for={}, kernel={})}
    rows = re.findall(r"^\| `(gpuroom_\w+)` \| (\w+) \| ([\w, ]+) \|",
                      (ROOT / "docs" / "METRICS.md").read_text(), re.M)
    assert served == set(rows)
