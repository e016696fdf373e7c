"""What one job sends (:mod:`fornace.conductor.jobs.messages`): numbered,
fenced, masked reports; task events, the trace and then the result, which
counts the job's error reports."""
from __future__ import annotations

import threading

from fornace.common import contract
from fornace.conductor.jobs.messages import JobMessages
from fornace.conductor.jobs.tracing import JobTrace
from standins import reports_in


class Sent:
    """Every message handed to the broker, in order: (queue, body, message id)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict, str]] = []
        self.lock = threading.Lock()

    def __call__(self, queue, batch) -> None:
        with self.lock:
            self.messages += [(queue, body, message_id) for body, message_id in batch]


def report(text: str, level: str = "info") -> dict:
    return contract.report_body("e1", "environment", text, level, "e1")


def test_reports_are_numbered_fenced_once_locked_and_their_errors_counted():
    sent = Sent()
    messages = JobMessages(sent, "e1", "j1", "t1", {"s3cret"})
    messages.report(report("before the lock"))
    messages.fence = 7
    messages.report(report("it failed", "error"))
    messages.report(report(messages.mask("the password s3cret"), "warning"))
    messages.result({"id": "e1", "services": []})
    messages.close()
    packs = [(body, message_id) for queue, body, message_id in sent.messages
             if queue == contract.REPORTS]
    # the first alone (no fence yet), the fenced two in one pack (contract 1.12)
    assert [m for _, m in packs] == ["t1-report-1", "t1-report-2"]
    reports = reports_in(packs)
    assert [m for _, m in reports] == ["t1-report-1", "t1-report-2", "t1-report-3"]
    assert [contract.fence_of(b, "report") for b, _ in reports] == [None, 7, 7]
    assert "s3cret" not in reports[2][0]["text"]
    assert messages.error_reports == 1
    queue, result, message_id = sent.messages[-1]     # last: after every report
    assert (queue, message_id) == (contract.RESULTS, "t1")
    assert contract.error_reports_of(result) == 1 and contract.fence_of(result, "r") == 7


def test_the_last_task_events_and_the_trace_go_before_the_result():
    sent = Sent()
    messages = JobMessages(sent, "e1", "j1", "t1", set())
    messages.fence = 3
    messages.recorder.task("u1", "web1", "deploy", "new", "running")   # waits for its batch
    messages.trace(JobTrace(set()), "deploy")
    messages.result({"id": "e1", "services": []})
    messages.close()
    on_results = [(body.get("kind"), message_id) for queue, body, message_id in sent.messages
                  if queue == contract.RESULTS]
    assert [kind for kind, _ in on_results] == ["tasks", "trace", None]
    assert on_results[-1][1] == "t1"
    assert all(contract.fence_of(body, "event") == 3 for _, body, _ in sent.messages)
    assert contract.ERROR_REPORTS not in sent.messages[-1][1]   # none: not said
