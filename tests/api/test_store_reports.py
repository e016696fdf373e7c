"""The reports store (:mod:`fornace.api.stores.reports`): reports stored in
batches, once each, masked with their job's secrets, and the 0.2 views of
them -- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import pytest

from fornace.common import contract
from test_jobs_api import _api, action, deployed, event, new_env
from apikit import web_server


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def test_reports_in_a_batch(api, monkeypatch, caplog):
    from fornace.api.stores import reports as reports_module

    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]

    def report(text, level="info"):
        return contract.report_body(env_id, "environment", text, level, env_id)

    api.store.reports.add(report("stored before"), f"{job}-report-0")
    items = [(report("one"), f"{job}-report-1"),
             (report("two, P@ssw0rd-web"), f"{job}-report-2"),
             (report("one"), f"{job}-report-1"),                  # redelivered in the batch
             ({"text": "garbage"}, "bad"),
             (report("stored before"), f"{job}-report-0"),        # redelivered
             (report("three", "warning"), f"{job}-report-3")]
    outcomes = api.store.reports.add_all(items)
    assert [type(o).__name__ for o in outcomes] == [
        "NoneType", "NoneType", "NoneType", "ContractError", "NoneType", "NoneType"]
    shown = api.client.get(f"/environments/{env_id}/deployments/{job}").json()["reports"]
    assert [(r["level"], r["text"]) for r in shown] == [
        ("info", "stored before"), ("info", "one"), ("info", "two, ***"),
        ("warning", "three")]

    # a report stored by another consumer after the batch looked: one by one, stored once
    monkeypatch.setattr(reports_module, "stored_message_ids", lambda db, ids: set())
    caplog.set_level("INFO", logger="fornace.api.stores.reports")
    assert api.store.reports.add_all([(report("four"), f"{job}-report-4"),
                                      (report("three", "warning"), f"{job}-report-3")]) == \
        [None, None]
    assert "one by one" in caplog.text and f"report {job}-report-3 already stored" in caplog.text
    shown = api.client.get(f"/environments/{env_id}/deployments/{job}").json()["reports"]
    assert [r["text"] for r in shown] == ["stored before", "one", "two, ***", "three", "four"]


def test_a_large_batch_is_copied_and_a_report_stored_meanwhile_stays_once(api, monkeypatch):
    """From COPY_FROM rows PostgreSQL takes a batch's reports by COPY (one
    statement); a report another consumer stored meanwhile fails it as an
    insert would, and the batch is stored one by one, that report once."""
    from fornace.api.stores import reports as reports_module
    from fornace.common.db.inserts import COPY_FROM
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]

    def report(n):
        return (contract.report_body(env_id, "unit", f"r{n}", "info", env_id),
                f"{job}-report-{n}")
    first = [report(n) for n in range(1, COPY_FROM + 6)]
    assert api.store.reports.add_all(first) == [None] * len(first)
    monkeypatch.setattr(reports_module, "stored_message_ids", lambda db, ids: set())
    again = first[-3:] + [report(n) for n in range(COPY_FROM + 6, 2 * COPY_FROM + 6)]
    assert api.store.reports.add_all(again) == [None] * len(again)
    shown = api.client.get(f"/environments/{env_id}/deployments/{job}").json()["reports"]
    assert [r["text"] for r in shown] == [f"r{n}" for n in range(1, 2 * COPY_FROM + 6)]


def test_a_pack_of_reports_is_stored_as_the_reports_it_holds(api):
    """Contract 1.12: a pack's reports get the ids they stand for (a redelivered
    pack, or one packed otherwise, stores nothing twice); a bad report in it
    sets the pack aside naming that report, the others stored; a pack that is
    not one is refused whole."""
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]

    def report(text, level="info"):
        return contract.report_body(env_id, "environment", text, level, env_id)

    singles = [(report(f"r{n}"), f"{job}-report-{n}") for n in range(1, 6)]
    [pack] = contract.pack_reports(singles[:3])
    assert pack[1] == f"{job}-report-1" and len(pack[0]["reports"]) == 3
    assert api.store.reports.add_all([pack, pack]) == [None, None]   # redelivered
    # the same reports packed otherwise, beside a pack holding a bad one
    regrouped = contract.pack_reports(singles[1:])
    bad = ({"environment_id": env_id, "reports": [report("r6"), {"text": "no fields"},
                                                  report("r8", "error")]},
           f"{job}-report-6")
    not_a_pack = ({"environment_id": env_id, "reports": [report("r9")]}, "no-number")
    outcomes = api.store.reports.add_all(regrouped + [bad, not_a_pack])
    assert outcomes[:len(regrouped)] == [None] * len(regrouped)
    assert str(outcomes[-2]).startswith(f"{job}-report-7: report message: ")
    assert "message id must be <task id>-report-<n>" in str(outcomes[-1])
    shown = api.client.get(f"/environments/{env_id}/deployments/{job}").json()["reports"]
    assert [r["text"] for r in shown] == ["r1", "r2", "r3", "r4", "r5", "r6", "r8"]


def test_a_running_jobs_secrets_mask_every_batch_of_its_reports_and_events(api):
    """Its secrets are read once and kept while it runs: later batches are masked too."""
    env_id, session = new_env(api.client, [web_server()])
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code \
        == 200
    body, message_id = api.published.tasks[-1]
    secret = body["services"][0]["adminPassword"]
    for batch in range(3):   # three batches: the first reads the secrets, the others keep them
        api.store.reports.add_all([(contract.report_body(env_id, "environment",
                                                         f"batch {batch}: password {secret}",
                                                         "info", env_id),
                                    f"{message_id}-report-{batch + 1}")])
        event(api, env_id, message_id, f"T{batch}", status="running",
              summary=f"with {secret}", log=[f"line {secret}"])
    reports = api.client.get(f"/environments/{env_id}/deployments/{message_id}").text
    job = api.client.get(f"/environments/{env_id}/jobs/{message_id}").text
    for text in (reports, job):
        assert secret not in text
    assert reports.count("password ***") == 3 and job.count("with ***") == 3


@pytest.fixture
def postgres_api(tmp_path):
    yield from _api("postgres", tmp_path)


def test_reports_postgresql_cannot_hold_are_set_aside_not_retried_for_ever(postgres_api):
    """An id longer than its column, a NUL in the text, a message id longer than
    its column: PostgreSQL refuses each, at every redelivery; each is set aside
    with the reason (the consumer drops it) and the reports behind it are stored."""
    api = postgres_api
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]

    def report(text, entity_id=env_id):
        return contract.report_body(entity_id, "environment", text, "info", env_id)

    items = [(report("long id", "x" * 70), f"{job}-report-1"),
             (report("nul \x00 here"), f"{job}-report-2"),
             (report("long message id"), "m" * 70),
             (report("after them"), f"{job}-report-3")]
    outcomes = api.store.reports.add_all(items)
    assert [type(o).__name__ for o in outcomes] == ["ContractError"] * 3 + ["NoneType"]
    assert "value too long" in str(outcomes[0]) and "NUL" in str(outcomes[1])
    shown = api.client.get(f"/environments/{env_id}/deployments/{job}").json()["reports"]
    assert [r["text"] for r in shown] == ["after them"]
    with pytest.raises(contract.ContractError, match="holds a NUL"):
        api.store.reports.add(*items[1])                      # alone, the same
