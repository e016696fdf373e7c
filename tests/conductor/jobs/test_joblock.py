"""The job lock: one job per environment across conductors, on SQLite and PostgreSQL."""
from __future__ import annotations

import datetime
import threading

import pytest
from sqlalchemy import event, text

from fornace.common.db.engine import make_engine, upgrade
from apikit import migrated_database, reset_postgres
from fornace.conductor.jobs.lock import (AlreadyDone, Grant, HeldTask, JobLock, LockHeld, Revoked,
                                         Silent)
from services import postgres_url

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    yield from migrated_database(request.param, tmp_path)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def lock(url, clock):
    lock = JobLock(url, clock)
    yield lock
    lock.close()


def test_free_lock_is_taken_then_refused_to_another_job(lock):
    grant = lock.acquire("env1", "job1", "conductor-a")
    assert grant == Grant("env1", "job1", "conductor-a", 1)
    held = lock.acquire("env1", "job2", "conductor-b")
    assert held == LockHeld("job1", "conductor-a", T0)
    assert "job job1" in held.describe("env1") and "conductor-a" in held.describe("env1")
    assert isinstance(lock.acquire("env2", "job2", "conductor-b"), Grant)  # per environment


def test_a_copy_of_the_same_job_waits_while_the_first_beats(lock, clock):
    """Regression: the same job used to take the lock over whoever held it, so a
    redelivered task ran beside its first copy."""
    first = lock.acquire("env1", "job1", "conductor-a")
    clock.advance(30)
    assert lock.heartbeat(first)
    clock.advance(30)
    assert lock.acquire("env1", "job1", "conductor-b", stale_after=60) == \
        LockHeld("job1", "conductor-a", T0)
    clock.advance(31)   # 61 s without a heartbeat: conductor-a is gone
    second = lock.acquire("env1", "job1", "conductor-b", stale_after=60)
    assert second == Grant("env1", "job1", "conductor-b", 2)


def test_a_stale_lock_is_taken_over_and_its_old_holder_learns_it(lock, clock):
    first = lock.acquire("env1", "job1", "conductor-a")
    clock.advance(30)
    assert lock.heartbeat(first)
    clock.advance(59)
    assert isinstance(lock.acquire("env1", "job2", "conductor-b", stale_after=60), LockHeld)
    clock.advance(2)  # 61 s since the last heartbeat
    second = lock.acquire("env1", "job2", "conductor-b", stale_after=60)
    assert isinstance(second, Grant) and second.token == first.token + 1
    assert lock.holder("env1").job_id == "job2"
    assert not lock.heartbeat(first)  # job1 learns it lost the lock


def test_the_old_holder_cannot_free_its_successors_lock(lock, clock):
    """Regression: release was keyed by the job id, so conductor A, whose task was
    redelivered to B, deleted B's lock and a third job was granted it while B ran."""
    a = lock.acquire("env1", "job1", "conductor-a")
    clock.advance(61)
    b = lock.acquire("env1", "job1", "conductor-b", stale_after=60)
    assert isinstance(b, Grant)
    assert not lock.release(a)                       # A comes back and ends: no effect
    assert lock.holder("env1") == LockHeld("job1", "conductor-b", clock.now)
    assert isinstance(lock.acquire("env1", "job2", "conductor-c"), LockHeld)
    assert lock.heartbeat(b) and lock.release(b)


def test_release_frees_the_row_and_keeps_the_token(lock):
    first = lock.acquire("env1", "job1", "a")
    assert lock.release(first)
    assert lock.holder("env1") is None and lock.token("env1") == 1
    second = lock.acquire("env1", "job2", "b")
    assert second.token == 2                          # grows across releases


def test_a_job_that_ended_is_not_run_again(lock):
    grant = lock.acquire("env1", "job1", "a")
    assert lock.release(grant)
    assert lock.acquire("env1", "job1", "b") == AlreadyDone("job1")
    assert isinstance(lock.acquire("env1", "job2", "b"), Grant)



def test_a_copy_of_an_ended_job_is_not_run_however_late_it_comes(lock, clock):
    """Regression (issue 29): a freed row was taken as stale past ``stale_after``
    whatever job it last ran, so a copy redelivered 61 s after its job ended got
    a grant and ran the job again."""
    grant = lock.acquire("env1", "job1", "a")
    assert lock.release(grant)
    clock.advance(61)
    assert lock.acquire("env1", "job1", "b", stale_after=60) == AlreadyDone("job1")


def ended_job(url: str, env_id: str, job_id: str, finished: bool = True) -> None:
    """An environment and its job as the API stores them, ended when ``finished``."""
    from sqlalchemy import insert
    from fornace.common.db.models import Environment, Job
    engine = make_engine(url)
    with engine.begin() as conn:
        if conn.execute(text("SELECT count(*) FROM environments WHERE id = :id"),
                        {"id": env_id}).scalar() == 0:
            conn.execute(insert(Environment.__table__).values(
                id=env_id, name=env_id, tenant_id="t1", description={}, created=T0,
                updated=T0))
        conn.execute(insert(Job.__table__).values(
            id=job_id, environment_id=env_id, tenant_id="t1", kind="deploy",
            state="success" if finished else "running", description={}, started=T0,
            finished=T0 if finished else None, created=T0, updated=T0))
    engine.dispose()


def test_the_jobs_own_record_decides_that_it_ended(url, lock, clock):
    """Regression (issue 29): only the last ended job was remembered, so a copy of
    an older one ran whenever it came; the job's row in the database, whoever
    ended it, now says it is over."""
    for job in ("job1", "job2"):
        assert lock.release(lock.acquire("env1", job, "a"))
    ended_job(url, "env1", "job1")      # the API stored their ends
    ended_job(url, "env1", "job2")
    ended_job(url, "env1", "job3", finished=False)
    assert lock.acquire("env1", "job1", "b") == AlreadyDone("job1")   # not the last one
    clock.advance(3600)
    assert lock.acquire("env1", "job1", "b") == AlreadyDone("job1")
    assert isinstance(lock.acquire("env1", "job3", "b"), Grant)       # still to run


def test_revocation_raises_the_token_and_stops_the_holder(lock, clock):
    grant = lock.acquire("env1", "job1", "a")
    assert lock.clear("env1") == 2
    assert lock.holder("env1") is None
    assert not lock.heartbeat(grant) and not lock.release(grant)
    # the revoked job has revoke_grace (5 s) to notice before another job may start
    assert lock.acquire("env1", "job3", "c") == Revoked()
    clock.advance(6)
    assert lock.acquire("env1", "job3", "c").token == 3
    assert lock.clear("never-locked") == 0


def test_an_engine_can_be_shared(url):
    engine = make_engine(url)
    lock = JobLock(engine)
    assert isinstance(lock.acquire("env1", "job1", "a"), Grant)
    lock.close()  # not ours: still usable
    with JobLock(engine) as again:
        assert again.holder("env1").job_id == "job1"
    engine.dispose()


def test_postgres_times_are_the_databases(monkeypatch):
    """Regression: lock times came from each conductor's clock."""
    url = postgres_url()
    reset_postgres(url)
    upgrade(url)
    from fornace.common.db import locks as module   # where this machine's clock is read
    monkeypatch.setattr(module, "utcnow", lambda: datetime.datetime(2000, 1, 1))  # a wrong clock
    with JobLock(url) as lock:
        with lock.engine.connect() as conn:
            before = conn.execute(text("SELECT timezone('UTC', clock_timestamp())")).scalar()
        lock.acquire("env1", "job1", "a")
        acquired = lock.holder("env1").acquired
        with lock.engine.connect() as conn:
            after = conn.execute(text("SELECT timezone('UTC', clock_timestamp())")).scalar()
    reset_postgres(url)
    assert before <= acquired <= after, (before, acquired, after)   # the database's clock


def race(url: str, clock: Clock, contenders: int, stale_after: float = 60.0) -> list:
    """``contenders`` threads, each with its own lock object, acquire at once."""
    barrier = threading.Barrier(contenders)
    results: list = [None] * contenders

    def contend(index: int) -> None:
        try:
            with JobLock(url, clock) as lock:
                barrier.wait()
                results[index] = lock.acquire("env1", f"job{index}", f"conductor-{index}",
                                              stale_after)
        except Exception as exc:  # noqa: BLE001 -- shown by the assertion
            results[index] = exc

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    return results


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_acquirers_exactly_one_wins(url, clock, attempt):
    results = race(url, clock, 6)
    winners = [i for i, held in enumerate(results) if isinstance(held, Grant)]
    assert len(winners) == 1, results
    assert {held.job_id for held in results if isinstance(held, LockHeld)} == \
        {f"job{winners[0]}"}


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_takeovers_of_a_stale_lock_exactly_one_wins(url, clock, attempt):
    with JobLock(url, clock) as lock:
        lock.acquire("env1", "dead-job", "dead-conductor")
        clock.advance(120)
        results = race(url, clock, 6)
        winners = [i for i, held in enumerate(results) if isinstance(held, Grant)]
        assert len(winners) == 1, results
        assert lock.holder("env1").job_id == f"job{winners[0]}"


# -- the task a grant keeps, for a takeover of its silent holder (issue 29) -------------

BODY = '{"id": "env1", "token": "a-user-token"}'


def kept_task(lock: JobLock, environment_id: str) -> tuple:
    with lock.engine.connect() as conn:
        return tuple(conn.execute(
            text("SELECT task_id, task_body, takeover_at FROM job_locks "
                 "WHERE environment_id = :e"), {"e": environment_id}).one())


def test_a_silent_holders_task_is_claimed_once_per_stale_period(lock, clock):
    """A frozen holder keeps its task message unacknowledged: its lock row keeps
    the task, for one other conductor to take it over."""
    lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    assert lock.silent(60) == []                              # it beats: not silent
    clock.advance(61)
    found = lock.silent(60)
    assert found == [Silent("env1", "job1", "a", 1, "m1")]
    assert lock.silent(60, other_than="a") == []              # not by its own conductor
    assert lock.claim(found[0], 60) == HeldTask("m1", BODY)
    assert lock.claim(found[0], 60) is None                   # a second conductor: no
    assert lock.silent(60) == []
    clock.advance(61)      # the claimant did not take the lock over in a stale period
    assert lock.claim(found[0], 60) == HeldTask("m1", BODY)
    successor = lock.acquire("env1", "job1", "b", stale_after=60, task=HeldTask("m1", BODY))
    assert successor.token == 2
    assert kept_task(lock, "env1")[:2] == ("m1", BODY) and kept_task(lock, "env1")[2] is None
    assert lock.claim(found[0], 60) is None and lock.silent(60) == []   # a new grant


def test_a_holder_that_beats_again_is_not_taken_over(lock, clock):
    grant = lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    clock.advance(61)
    found = lock.silent(60)
    assert found and lock.heartbeat(grant)                    # it woke before the claim
    assert lock.claim(found[0], 60) is None


def test_only_jobs_that_did_not_end_are_taken_over(url, lock, clock):
    lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    lock.acquire("env2", "job2", "a", task=HeldTask("m2", BODY))
    lock.acquire("env3", "job3", "a")                          # no task kept: nothing to run
    ended_job(url, "env1", "job1")                             # ended, whoever ended it
    ended_job(url, "env2", "job2", finished=False)
    clock.advance(61)
    assert [s.job_id for s in lock.silent(60)] == ["job2"]


def test_a_freed_or_revoked_lock_keeps_no_task(lock, clock):
    grant = lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    assert lock.release(grant)
    lock.acquire("env2", "job2", "a", task=HeldTask("m2", BODY))
    lock.clear("env2")
    assert kept_task(lock, "env1") == (None, None, None)
    assert kept_task(lock, "env2") == (None, None, None)
    assert "a-user-token" not in repr(HeldTask("m1", BODY))   # never printed


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_claims_of_a_silent_holder_exactly_one_wins(url, clock, attempt):
    with JobLock(url, clock) as lock:
        lock.acquire("env1", "job1", "frozen", task=HeldTask("m1", BODY))
        clock.advance(120)
        found = lock.silent(60)[0]
    barrier, claims = threading.Barrier(6), []

    def claim() -> None:
        with JobLock(url, clock) as mine:
            barrier.wait()
            claims.append(mine.claim(found, 60))

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims, key=lambda c: c is None) == [HeldTask("m1", BODY)] + [None] * 5


def statements_carrying(lock: JobLock, marker: str) -> list[str]:
    """The statements ``lock`` sends from now on whose parameters hold ``marker``."""
    seen: list[str] = []

    def listen(conn, cursor, statement, parameters, context, executemany) -> None:
        if marker in repr(parameters):
            seen.append(statement.split(None, 1)[0].upper())
    event.listen(lock.engine, "before_cursor_execute", listen)
    return seen


def test_a_job_that_ended_meanwhile_takes_no_lock(url, lock, clock):
    """Taken, checked and kept in one transaction: a job found ended rolls back."""
    ended_job(url, "env1", "job1")
    assert lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY)) == AlreadyDone("job1")
    assert lock.holder("env1") is None and lock.token("env1") == 0
    assert isinstance(lock.acquire("env1", "job2", "a"), Grant)
    clock.advance(61)           # a stale holder is not taken over by an ended job either
    assert lock.acquire("env1", "job1", "b", stale_after=60) == AlreadyDone("job1")
    assert lock.holder("env1").job_id == "job2" and lock.token("env1") == 1


def test_a_waiting_job_sends_its_task_once_with_its_grant(lock, clock):
    """A job waiting for the lock tries again every second: its task (a 1000-unit
    model is megabytes) goes to the database once, with the grant, never with
    the tries; a takeover of its holder still finds it."""
    first = lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    sent = statements_carrying(lock, "job2-body")
    waiting = HeldTask("m2", BODY.replace("env1", "job2-body"))
    for _ in range(3):
        assert isinstance(lock.acquire("env1", "job2", "b", task=waiting), LockHeld)
    assert sent == []
    assert lock.release(first)
    grant = lock.acquire("env1", "job2", "b", task=waiting)
    assert isinstance(grant, Grant) and grant.token == 2
    assert sent == ["UPDATE"]                                  # once, keyed on the grant
    assert kept_task(lock, "env1") == ("m2", waiting.body, None)
    clock.advance(61)
    found = lock.silent(60)
    assert found == [Silent("env1", "job2", "b", 2, "m2")]
    assert lock.claim(found[0], 60) == waiting


def test_a_takeover_grant_replaces_the_silent_holders_task(lock, clock):
    """The successor's row keeps its own task, never the one before it."""
    lock.acquire("env1", "job1", "a", task=HeldTask("m1", BODY))
    clock.advance(61)
    successor = lock.acquire("env1", "job2", "b", stale_after=60, task=HeldTask("m2", "{}"))
    assert successor.token == 2
    assert kept_task(lock, "env1") == ("m2", "{}", None)
    other = lock.acquire("env2", "job3", "b")                  # no task: none kept
    assert isinstance(other, Grant) and kept_task(lock, "env2") == (None, None, None)


def test_a_task_is_not_kept_in_a_lock_its_grant_lost(lock, clock):
    """Stored by the grant's token: a grant taken over meanwhile stores nothing."""
    grant = lock.acquire("env1", "job1", "a")
    clock.advance(61)
    lock.acquire("env1", "job2", "b", stale_after=60, task=HeldTask("m2", "{}"))
    with lock.engine.begin() as conn:
        assert lock._keep(conn, grant, HeldTask("m1", BODY)) is False
    assert kept_task(lock, "env1") == ("m2", "{}", None)
