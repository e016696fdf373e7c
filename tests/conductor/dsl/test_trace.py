"""The recording trace keeps a bounded amount of rule matches and changed values
per round."""
from __future__ import annotations

from types import SimpleNamespace

from fornace.common.cursor import Cursor
from fornace.conductor.dsl.trace import RecordingTrace, format_events


def test_past_its_budget_a_round_keeps_changes_without_their_values():
    """Regression: a workflow rewriting a growing value 100,000 times in one round
    made `simulate` hold every value (MemoryError at 1 GB)."""
    rounds = []
    trace = RecordingTrace(lambda entry, events: rounds.append(entry), round_bytes=1500)
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


def test_past_its_budget_a_round_only_counts_rule_matches_and_changes():
    """Regression: a rule that never settles (a counter) made `simulate --json` print
    48 MB, one entry per pass; past the round's budget they are counted, and the
    text says how many were not shown."""
    printed: list[str] = []
    trace = RecordingTrace(lambda entry, events: printed.append(format_events(events)),
                           round_bytes=2000)
    node = SimpleNamespace(where="w.xml:3", attrs={"desc": "count"})
    model = {"services": [{"id": "s1"}]}
    root = Cursor(model)
    service = Cursor(model["services"][0], 0, Cursor(model["services"], "services", root))
    trace.round_started(1)
    for n in range(100):
        trace.rule_matched(node, "count", service)
        trace.changed("count", "w.xml:3", "services.0.state.n", n)
    trace.reported({"level": "info", "entity": None, "id": None, "text": "still here"})
    trace.flush()
    [text] = printed
    matches = text.count("rule count at w.xml:3 matched")
    changes = text.count("    set services.0.state.n = ")
    assert 0 < changes <= matches < 100
    assert (f"  ... {100 - matches} more rule match(es) and {100 - changes} more model "
            f"change(s) of round 1 not shown: a round's trace keeps 1 KiB") in text
    assert text.endswith("report [info] - : still here")          # reports all kept
