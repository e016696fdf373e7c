"""Every plan sent gets an answer: an executor that drops replies or raises
gives each plan left unanswered an error naming it (never a silent drop)."""
from __future__ import annotations

from enginekit import UNITS, send_command
from fornace.conductor.executors.base import PlanReply, run_plans
from fornace.conductor.executors.simulator import SimulatedCloud


class FirstOnly:
    """An agent executor that answers only the first plan of each batch."""

    def __init__(self) -> None:
        self.batches = []

    def run(self, requests):
        self.batches.append([r.unit for r in requests])
        return [PlanReply({"IsException": False, "Result": [
            {"IsException": False, "Result": ["done"]}]})][:len(requests)]


def test_a_dropped_reply_is_an_error_naming_the_plan(catalog):
    """Regression: replies were paired with requests by zip: the second unit's
    command was silently never finished."""
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.sent is None)]">'
                  + send_command("Tpl", body='<success><set path="state.sent">ok</set></success>'
                                             '<failure><set path="state.sent">failed</set>'
                                             '</failure>')
                  + '</rule></rule>')
    stacks, _ = SimulatedCloud().executors()
    agents = FirstOnly()
    run = catalog.run(stacks=stacks, agents=agents)
    outcomes = [a["outcome"] for a in run.actions()]
    assert len(agents.batches[0]) >= 2 and outcomes.count("success") == 1
    failed = [a for a in run.actions() if a["outcome"] == "failure"]
    assert len(failed) == len(agents.batches[0]) - 1
    assert all("NoReply" in str(a["error"]) and "no reply for Tpl on unit" in str(a["error"])
               for a in failed), failed


def test_run_plans_pads_and_trims():
    class Raises:
        def run(self, requests):
            raise OSError("broker gone")

    from fornace.conductor.executors.base import PlanRequest
    requests = [PlanRequest("s", f"u{i}", "Tpl", {"ID": str(i)}) for i in range(3)]
    broken = run_plans(Raises(), requests)
    assert [r.result["Result"] for r in broken] == [["OSError", "broker gone"]] * 3
    padded = run_plans(FirstOnly(), requests)
    assert len(padded) == 3 and padded[0].result["IsException"] is False
    assert [r.result["Result"][0] for r in padded[1:]] == ["NoReply", "NoReply"]
    assert "unit u2" in padded[2].result["Result"][1]

    class TooMany:
        def run(self, requests):
            return [PlanReply({"IsException": False, "Result": []})] * (len(requests) + 2)
    assert len(run_plans(TooMany(), requests)) == 3
    assert run_plans(Raises(), []) == []
