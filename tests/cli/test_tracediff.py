"""The comparison of two job traces (cli/client/tracediff.py) on hand-made trace
documents, and what ``workflow simulate --environment`` takes from a real one."""
from __future__ import annotations

import json

from fornace.cli.client.simulation import failed_actions, recorded_results, unit_names
from fornace.cli.client.tracediff import (compare, diff_lines, differs, fired_rules,
                                          queued_actions, summary)


def trace(*rounds: list[dict]) -> dict:
    return {"version": 1, "rounds": [{"round": n, "events": list(events)}
                                     for n, events in enumerate(rounds, 1)]}


def rule(name: str, at: str, obj: str = "services.0.units.0", id: str = "u1") -> dict:
    return {"e": "rule", "pass": 1, "rule": name, "at": at, "object": obj, "id": id}


def queued(n: int, kind: str, template: str | None, unit: str | None, name: str,
           at: str) -> dict:
    event = {"e": "queued", "n": n, "kind": kind, "rule": name, "at": at}
    if template:
        event["template"] = template
    if unit:
        event["unit"] = unit
    return event


def ended(n: int, outcome: str = "success", error: str | None = None) -> dict:
    event = {"e": "ended", "n": n, "outcome": outcome}
    if error is not None:
        event["error"] = error
    return event


STACK = [rule("line24", "Common.xml:24"),
         queued(1, "update-cf-stack", "LinuxInstance", None, "line24", "Common.xml:25"),
         {"e": "task", "n": 1, "change": "01A"}, ended(1),
         {"e": "set", "rule": "line24", "path": "services.0.units.0.state.address",
          "value": "10.0.0.5"}]
DEPLOY = [rule("line33", "Web.xml:33"),
          queued(2, "send-command", "Deploy", "u1", "line33", "Web.xml:39"), ended(2),
          {"e": "report", "level": "info", "text": "deployed"}]
EMPTY = {"added": [], "removed": [], "changed": [], "rules_added": [], "rules_removed": []}


def test_the_same_run_differs_in_nothing():
    real = trace(STACK, DEPLOY)
    # numbers, task links, sets and reports play no part
    again = trace([e for e in STACK if e["e"] != "task"], DEPLOY)
    assert compare(real, again) == EMPTY
    assert not differs(compare(real, again))
    assert diff_lines(EMPTY) == [] and summary(EMPTY) == "no differences"


def test_queued_actions_carry_their_outcome():
    actions = queued_actions(trace(STACK, DEPLOY + [queued(3, "send-command", "Check", "u1",
                                                           "line40", "Web.xml:40")]))
    assert [(a.key, a.outcome) for a in actions] == [
        (("update-cf-stack", "LinuxInstance", ""), "success"),
        (("send-command", "Deploy", "u1"), "success"),
        (("send-command", "Check", "u1"), None)]     # never ended (a stop, a truncation)


def test_an_action_the_edit_drops_is_removed_and_its_rule_no_longer_fires():
    diff = compare(trace(STACK, DEPLOY), trace(STACK))
    assert diff["removed"] == [{"kind": "send-command", "template": "Deploy", "unit": "u1",
                                "rule": "line33", "at": "Web.xml:39", "outcome": "success"}]
    assert diff["added"] == diff["changed"] == diff["rules_added"] == []
    assert diff["rules_removed"] == [{"rule": "line33", "object": "services.0.units.0",
                                      "id": "u1", "at": "Web.xml:33"}]
    assert diff_lines(diff, {"u1": "web-1"}) == [
        "- send-command Deploy on unit web-1 (rule 'line33' at Web.xml:39)",
        "- rule 'line33' at Web.xml:33 on services.0.units.0 (u1) no longer fires"]
    assert summary(diff) == ("0 action(s) added, 1 removed, 0 changed; 0 rule firing(s) "
                             "added, 1 removed")


def test_another_template_is_one_action_added_and_one_removed():
    other = [rule("line33", "Web.xml:33"),
             queued(2, "send-command", "Other", "u1", "line33", "Web.xml:39"),
             ended(2, "failure", "no template Other")]
    diff = compare(trace(STACK, DEPLOY), trace(STACK, other))
    assert [(e["template"], e["outcome"]) for e in diff["added"]] == [("Other", "failure")]
    assert [e["template"] for e in diff["removed"]] == ["Deploy"]
    assert diff["rules_added"] == diff["rules_removed"] == []    # the same rule fired
    assert diff_lines(diff)[0] == ("+ send-command Other on unit u1 (rule 'line33' at "
                                   "Web.xml:39, failure)")


def test_the_same_action_from_another_place_or_with_another_outcome_is_changed():
    moved = [rule("line35", "Web.xml:35"),
             queued(2, "send-command", "Deploy", "u1", "line35", "Web.xml:41"),
             ended(2, "failure", "boom")]
    diff = compare(trace(STACK, DEPLOY), trace(STACK, moved))
    assert diff["added"] == diff["removed"] == []
    assert diff["changed"] == [{
        "kind": "send-command", "template": "Deploy", "unit": "u1",
        "before": {"rule": "line33", "at": "Web.xml:39", "outcome": "success"},
        "after": {"rule": "line35", "at": "Web.xml:41", "outcome": "failure"}}]
    assert [e["rule"] for e in diff["rules_added"]] == ["line35"]
    assert [e["rule"] for e in diff["rules_removed"]] == ["line33"]
    assert diff_lines(diff)[0] == (
        "~ send-command Deploy on unit u1: rule 'line33' at Web.xml:39, success -> "
        "rule 'line35' at Web.xml:41, failure")


def test_actions_are_counted_per_key_and_twins_paired_first():
    twice = DEPLOY + [queued(3, "send-command", "Deploy", "u1", "line50", "Web.xml:50"),
                      ended(3)]
    # the real run sent Deploy twice (from two places), the simulation once, from
    # the second place: the first is removed, nothing changed
    once = [queued(2, "send-command", "Deploy", "u1", "line50", "Web.xml:50"), ended(2)]
    diff = compare(trace(twice), trace(once))
    assert [(e["at"], e["template"]) for e in diff["removed"]] == [("Web.xml:39", "Deploy")]
    assert diff["changed"] == diff["added"] == []
    # and the other way round: one added
    back = compare(trace(once), trace(twice))
    assert [e["at"] for e in back["added"]] == ["Web.xml:39"] and not back["removed"]
    # three against one, none alike: one changed, two removed
    thrice = [queued(n, "send-command", "Deploy", "u1", "r", f"W.xml:{n}") for n in (1, 2, 3)]
    diff = compare(trace(thrice), trace([queued(1, "send-command", "Deploy", "u1", "r",
                                                "W.xml:9")]))
    assert len(diff["changed"]) == 1 and len(diff["removed"]) == 2


def test_rules_are_keyed_by_name_and_object():
    real = trace([rule("a", "W.xml:1", "services.0", "s1"), rule("a", "W.xml:1", "services.1",
                                                                  "s2")])
    sim = trace([rule("a", "W.xml:1", "services.0", "s1"),
                 rule("a", "W.xml:1", "services.0", "s1"),     # again: still one firing
                 rule("b", "W.xml:2", "services.1", "s2")])
    assert list(fired_rules(sim)) == [("a", "services.0"), ("b", "services.1")]
    diff = compare(real, sim)
    assert [(e["rule"], e["object"]) for e in diff["rules_added"]] == [("b", "services.1")]
    assert [(e["rule"], e["object"]) for e in diff["rules_removed"]] == [("a", "services.1")]
    assert diff_lines(diff) == ["+ rule 'b' at W.xml:2 on services.1 (s2) fires",
                                "- rule 'a' at W.xml:1 on services.1 (s2) no longer fires"]


def test_the_json_document_has_the_five_lists():
    diff = compare(trace(STACK, DEPLOY), {"rounds": [{"round": 1, "events": ["junk", 3]}]})
    assert sorted(json.loads(json.dumps(diff))) == ["added", "changed", "removed",
                                                   "rules_added", "rules_removed"]
    assert len(diff["removed"]) == 2 and len(diff["rules_removed"]) == 2


def test_what_failed_in_the_real_job_fails_in_the_simulation():
    real = trace(STACK[:3] + [ended(1, "failure", "stack failed")],
                 [queued(2, "send-command", "Deploy", "u1", "r", "W.xml:1"),
                  ended(2, "failure", '[{"type": "timeout", "timeout": 60}]'),
                  queued(3, "send-command", "Deploy", "u2", "r", "W.xml:1"), ended(3),
                  queued(4, "send-command", "Deploy", "u3", "r", "W.xml:1"),
                  ended(4, "cancelled")])
    assert failed_actions(real) == ([("LinuxInstance", None)], [("Deploy", "u1")])


def test_unit_names_and_recorded_results_come_from_the_model():
    result = [{"IsException": False, "Result": ["serving http://x/"]}]
    model = {"services": [{"units": [
        {"id": "u1", "name": "web_instance_0",
         "status": {"configs": {"Deploy@u1": {"ok": True, "result": result},
                                "Broken@u1": {"ok": False, "result": result}}}},
        {"id": "u2", "state": {"hostname": "web2"}}, {"id": "u3"}]}]}
    assert unit_names(model) == {"u1": "web_instance_0", "u2": "web2"}
    assert recorded_results(model) == {"Deploy": "serving http://x/"}
    assert unit_names({"services": "junk"}) == {} == recorded_results({})
