"""The job lock: one job per environment across conductors, on SQLite and PostgreSQL."""
from __future__ import annotations

import datetime
import threading

import pytest

from fornace.common.db.engine import make_engine, upgrade
from apikit import reset_postgres
from fornace.conductor.jobs.lock import JobLock, LockHeld
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
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'lock.sqlite'}"
        upgrade(url)
        yield url
        return
    url = postgres_url()
    reset_postgres(url)
    upgrade(url)
    yield url
    reset_postgres(url)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def lock(url, clock):
    lock = JobLock(url, clock)
    yield lock
    lock.close()


def test_free_lock_is_taken_then_refused_to_another_job(lock):
    assert lock.acquire("env1", "job1", "conductor-a") is None
    held = lock.acquire("env1", "job2", "conductor-b")
    assert held == LockHeld("job1", "conductor-a", T0)
    assert "job job1" in held.describe("env1") and "conductor-a" in held.describe("env1")
    assert lock.acquire("env2", "job2", "conductor-b") is None  # per environment


def test_the_same_job_takes_its_lock_over(lock, clock):
    """A rerun of a job after its conductor died (the broker redelivered the task)."""
    assert lock.acquire("env1", "job1", "conductor-a") is None
    clock.advance(5)
    assert lock.acquire("env1", "job1", "conductor-b") is None
    assert lock.holder("env1") == LockHeld("job1", "conductor-b", clock.now)


def test_a_stale_lock_is_taken_over(lock, clock):
    assert lock.acquire("env1", "job1", "conductor-a") is None
    clock.advance(30)
    assert lock.heartbeat("env1", "job1")
    clock.advance(59)
    assert lock.acquire("env1", "job2", "conductor-b", stale_after=60) is not None
    clock.advance(2)  # 61 s since the last heartbeat
    assert lock.acquire("env1", "job2", "conductor-b", stale_after=60) is None
    assert lock.holder("env1").job_id == "job2"
    assert not lock.heartbeat("env1", "job1")  # job1 learns it lost the lock


def test_release_only_by_the_holder_and_clear_by_anyone(lock):
    assert lock.acquire("env1", "job1", "a") is None
    lock.release("env1", "job2")
    assert lock.holder("env1").job_id == "job1"
    lock.release("env1", "job1")
    assert lock.holder("env1") is None
    assert lock.acquire("env1", "job2", "b") is None
    lock.clear("env1")
    assert lock.holder("env1") is None
    assert lock.acquire("env1", "job3", "c") is None


def test_an_engine_can_be_shared(url):
    engine = make_engine(url)
    lock = JobLock(engine)
    assert lock.acquire("env1", "job1", "a") is None
    lock.close()  # not ours: still usable
    with JobLock(engine) as again:
        assert again.holder("env1").job_id == "job1"
    engine.dispose()


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
    winners = [i for i, held in enumerate(results) if held is None]
    assert len(winners) == 1, results
    assert {held.job_id for held in results if held is not None} == {f"job{winners[0]}"}


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_takeovers_of_a_stale_lock_exactly_one_wins(url, clock, attempt):
    with JobLock(url, clock) as lock:
        lock.acquire("env1", "dead-job", "dead-conductor")
        clock.advance(120)
        results = race(url, clock, 6)
        winners = [i for i, held in enumerate(results) if held is None]
        assert len(winners) == 1, results
        assert lock.holder("env1").job_id == f"job{winners[0]}"
