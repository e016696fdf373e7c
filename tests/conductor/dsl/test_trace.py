"""The recording trace keeps a bounded amount of changed values per round."""
from __future__ import annotations

from fornace.conductor.dsl.trace import RecordingTrace


def test_past_its_budget_a_round_keeps_changes_without_their_values():
    """Regression: a workflow rewriting a growing value 100,000 times in one round
    made `simulate` hold every value (MemoryError at 1 GB)."""
    rounds = []
    trace = RecordingTrace(lambda entry, events: rounds.append(entry), round_bytes=1000)
    trace.round_started(1)
    for n in range(1, 6):
        trace.changed("grow", "w.xml:3", "services.0.state.s", "x" * (300 * n))
    trace.round_started(2)          # the budget is per round
    trace.changed("grow", "w.xml:3", "services.0.state.s", "y" * 900)
    trace.flush()
    first, second = [[c["value"] for c in r["changes"]] for r in rounds]
    assert first[:2] == ["x" * 300, "x" * 600]
    assert all(v.startswith("(not kept: this round's trace already holds") for v in first[2:])
    assert second == ["y" * 900]
