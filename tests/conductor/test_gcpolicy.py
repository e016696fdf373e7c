"""The collection policy of running deployments: relaxed while any runs, then back."""
from __future__ import annotations

import gc
import threading

import pytest

from fornace.conductor.gcpolicy import RELAXED, relaxed_collection


@pytest.fixture(autouse=True)
def known_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_relaxed_inside_and_back_after():
    with relaxed_collection():
        assert gc.get_threshold() == RELAXED
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_thresholds_of_the_caller_are_kept():
    gc.set_threshold(100_000, 5, 500)
    with relaxed_collection():
        assert gc.get_threshold() == (100_000, 20, 500)
    assert gc.get_threshold() == (100_000, 5, 500)


def test_overlapping_sessions_restore_only_after_the_last():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with relaxed_collection():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with relaxed_collection():
            second_in.set()
            first_out.wait(10)
            seen["after the first left"] = gc.get_threshold()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen["after the first left"] == RELAXED
    assert gc.get_threshold() == (700, 10, 10)


def test_a_session_runs_relaxed(catalog):
    """Session.run holds the policy while its actions run, and lets it go after."""
    from enginekit import UNITS, send_command
    from fornace.conductor.executors.simulator import SimulatedCloud

    cloud = SimulatedCloud()
    stacks, agents = cloud.executors()
    observed = []
    plain_run = agents.run
    agents.run = lambda requests: observed.append(gc.get_threshold()) or plain_run(requests)
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.done is None)]">'
                  + send_command("Tpl", body='<success><set path="state.done">1</set></success>')
                  + '</rule></rule>')
    run = catalog.run(stacks=stacks, agents=agents)
    assert run.status == "success", run.reports
    assert observed and all(t == RELAXED for t in observed)
    assert gc.get_threshold() == (700, 10, 10)
