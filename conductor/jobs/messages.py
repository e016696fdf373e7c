"""What one job sends to the API: its reports, task events, trace and result.

They all leave through the job's :class:`~fornace.conductor.jobs.outbox.Outbox`
(ordered, a confirm per batch), each with the job's lock token once it holds
the environment's lock (the API drops what an older holder sends), and with
every known secret masked.  Reports are numbered ``<task id>-report-<n>``, so
the API stores a report of a rerun once; the result, sent last, says how many
of them were errors (contract 1.11: reports and results travel on two queues).
"""
from __future__ import annotations

import itertools
import logging
from typing import Any

from fornace.common import contract
from fornace.common.secrets import mask_text
from fornace.conductor.jobs.outbox import Outbox, Sender
from fornace.conductor.jobs.records import JobRecorder
from fornace.conductor.jobs.tracing import JobTrace, encode

LOG = logging.getLogger(__name__)

EVENT_BATCH_SECONDS = 0.05   # task events wait at most this long for others to go with


class JobMessages:
    """The outgoing messages of the job ``job_id`` (its task ``task_id``)."""

    def __init__(self, send: Sender, environment_id: str, job_id: str, task_id: str,
                 secrets: set[str]) -> None:
        self.environment_id = environment_id
        self.job_id = job_id
        self.task_id = task_id
        self.secrets = secrets
        self.fence: int | None = None     # the grant's token, once the lock is held
        self.error_reports = 0            # error reports sent: the job ends with errors
        self._numbers = itertools.count(1)
        # reports in packs (contract 1.12): a few messages for a thousand units' reports
        self.outbox = Outbox(send, job_id, packers={contract.REPORTS: contract.pack_reports})
        # task events on the results queue: the API stores them before the result
        self.recorder = JobRecorder(
            environment_id, job_id,
            lambda body, message_id: self.outbox.put(contract.RESULTS, self.fenced(body),
                                                     message_id),
            mask=self.mask, batch_seconds=EVENT_BATCH_SECONDS)

    def mask(self, text: str) -> str:
        return mask_text(text, self.secrets) if self.secrets else text

    def fenced(self, body: dict[str, Any]) -> dict[str, Any]:
        return contract.fenced(body, self.fence)

    def report(self, body: dict[str, Any]) -> None:
        """Send a ``task-reports`` body (:func:`fornace.common.contract.report_body`)."""
        self.outbox.put(contract.REPORTS, self.fenced(body),
                        f"{self.task_id}-report-{next(self._numbers)}")
        if body.get("level") == "error":
            self.error_reports += 1

    def trace(self, trace: JobTrace, action: str) -> None:
        """The job's trace, on the results queue just before its result; a trace
        that cannot be sent is lost with a warning, never the job."""
        self.recorder.flush()   # after the job's last task events
        try:
            body = contract.trace_event_body(
                self.environment_id, self.job_id,
                encode(trace.document(self.environment_id, self.job_id, action)))
            self.outbox.put(contract.RESULTS, self.fenced(body), f"{self.task_id}-trace")
        except Exception as exc:  # noqa: BLE001 -- the result matters more
            LOG.warning("environment %s: job %s: its trace was not sent: %s",
                        self.environment_id, self.job_id, exc)

    def result(self, model: dict[str, Any]) -> None:
        """The final model, once every task event, report and the trace put
        before it is confirmed (it raises when it cannot be sent)."""
        self.recorder.flush()   # every task stored before the result ends the job
        self.outbox.finish(contract.RESULTS,
                           self.fenced(contract.result_body(model, self.error_reports)),
                           self.task_id)

    def flush(self) -> None:
        """Send what waits now (under the lock: its token still the current one)."""
        self.recorder.flush()
        self.outbox.flush()

    def close(self) -> None:
        """The job ended: what could not be sent is set aside (see Outbox.close)."""
        self.recorder.flush()
        self.outbox.close()
