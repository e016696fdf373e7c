"""Regular expressions and nesting from workflow packages over the API: a pattern
RE2 cannot run is refused at upload naming ``types.json:LINE``, a backtracking
bomb is a plain 400, the work of one validation is bounded, and nesting past
the depth limit in any file of a package is a 400 naming the file."""
from __future__ import annotations

import json

import pytest

from packagekit import package_files, zip_of
from test_packages_api import upload
from test_pins import GREET, api, environment, put   # noqa: F401 (api: a fixture)
from fornace.common.patterns import compile_pattern

BOMB = "^(a+)+$"
WIDE = r"(?:\w+\s?){1,150}x"   # a large program: few characters per match


def note_type(**fields) -> dict:
    return {"greetNote": {"extends": "linuxService",
                          "schema": {"properties": fields}}}


def greet_with(version: str, **fields) -> bytes:
    """The greet package with a ``greetNote`` type of ``fields`` (types.json indented:
    a field's ``pattern`` is on line 9)."""
    return zip_of({"package.json": json.dumps({"name": "greet", "version": version}).encode(),
                   "workflows/Greet.xml": GREET.format(text="hi").encode(),
                   "types.json": json.dumps({"types": note_type(**fields)}, indent=2).encode()})


def pinned_environment(api, version: str, **fields) -> str:
    answer = upload(api, greet_with(version, **fields))
    assert answer.status_code == 201, answer.text
    env_id = environment(api, f"env-{version}")
    assert put(api, env_id, "greet", {"version": version}).status_code == 200
    return env_id


def add(api, env_id: str, **fields):
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    service = {"type": "greetNote", "name": "memo",
               "osImage": {"name": "local", "type": "linux"}, "units": [{}], **fields}
    return api.client.post(f"/environments/{env_id}/services", json=service,
                           headers={"X-Configuration-Session": session})


@pytest.mark.parametrize("pattern,reason", [
    ("([a-", "missing ]: [a-"),
    (r"(\w)\1", "no backreferences or look-around"),
    ("(?!admin)", "no backreferences or look-around"),
])
def test_a_pattern_re2_cannot_run_is_refused_at_upload_naming_its_line(api, pattern, reason):
    answer = upload(api, greet_with("1.0", text={"type": "string", "pattern": pattern}))
    assert answer.status_code == 400, answer.text
    problems = answer.json()["error"]["problems"]
    assert len(problems) == 1
    assert problems[0].startswith("types.json:9: type 'greetNote': "
                                  "schema.properties.text.pattern: invalid pattern ")
    assert reason in problems[0]
    assert api.client.get("/packages").json() == {"packages": []}


def test_a_backtracking_bomb_is_a_plain_400(api):
    # Python's re takes 2^n steps on this (11.6 s at 28 characters, the API held)
    env_id = pinned_environment(api, "1.0", text={"type": "string", "pattern": BOMB})
    refused = add(api, env_id, text="a" * 64 + "!")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].startswith(
        "text: must match the pattern '^(a+)+$' (got 'aaaa")
    assert add(api, env_id, text="a" * 64).status_code == 200


def test_dollar_is_the_end_of_the_value_as_in_json_schema(api):
    env_id = pinned_environment(api, "1.0", text={"type": "string", "pattern": "^[a-z]+$"})
    refused = add(api, env_id, text="web\n")   # Python's re: $ matches before the newline
    assert refused.status_code == 400 and "must match the pattern" in refused.text


def test_a_value_too_long_for_the_pattern_is_a_400(api):
    env_id = pinned_environment(api, "1.0", text={"type": "string", "pattern": WIDE})
    longest = compile_pattern(WIDE).max_chars
    assert add(api, env_id, text="a" * (longest - 1) + "x").status_code == 200
    refused = add(api, env_id, name="m2", text="a" * longest + "x")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        f"text: is too long to check against the pattern {WIDE!r}: at most {longest} "
        f"characters (got {longest + 1})")


def test_the_work_of_one_validation_is_bounded(api):
    env_id = pinned_environment(api, "1.0", tags={
        "type": "array", "items": {"type": "string", "pattern": WIDE}})
    value = "a" * (compile_pattern(WIDE).max_chars - 2) + "x"
    assert add(api, env_id, tags=[value] * 5).status_code == 200
    refused = add(api, env_id, name="m2", tags=[value] * 40)   # each match in bounds
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert message.startswith("tags[") and "validation took too long" in message


def test_unique_items_are_within_the_budget_too(api):
    env_id = pinned_environment(api, "1.0", ids={
        "type": "array", "uniqueItems": True, "items": {"type": "integer"}})
    refused = add(api, env_id, ids=list(range(4000)))   # 8 million comparisons
    assert refused.status_code == 400 and "validation took too long" in refused.text


def _deep(levels: int) -> dict:
    value: dict = {"type": "string"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"x": value}}
    return value


@pytest.mark.parametrize("name,content,problem", [
    ("package.json", b'{"name": "hello",\n "version": ' + b"[" * 3000 + b"]" * 3000 + b"}",
     "package.json:2: JSON nested deeper than 100 levels"),
    ("types.json", b'{"types": ' + b"[" * 3000 + b"]" * 3000 + b"}",
     "types.json:1: JSON nested deeper than 100 levels"),
    ("types.json", json.dumps({"types": note_type(text=_deep(400))}).encode(),
     "types.json:1: JSON nested deeper than 100 levels"),
    ("workflows/deep.xml", b"<workflow>" + b"<a>" * 3000 + b"</a>" * 3000 + b"</workflow>",
     "workflows/deep.xml:1: XML nested deeper than 256 elements"),
])
def test_nesting_past_the_limit_is_a_400_naming_the_file(api, name, content, problem):
    answer = upload(api, zip_of({**package_files(), name: content}))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["problems"][0].startswith(problem)


def test_a_package_stored_before_a_pattern_rule_it_breaks_is_a_409_naming_it(api):
    """A package uploaded by an older Fornace may hold a pattern RE2 refuses: the
    environment using it gets a 409 saying which package to move from, not a 500."""
    from fornace.common.db.models import Package

    env_id = pinned_environment(api, "1.0", text={"type": "string", "pattern": "^a+$"})
    with api.store.sessions() as db, db.begin():
        stored = db.query(Package).filter(Package.name == "greet").one()
        types = json.loads(json.dumps(stored.types))
        types["greetNote"]["schema"]["properties"]["text"]["pattern"] = r"(\w)\1"
        stored.types = types
        package_id = stored.id
    answer = add(api, env_id, text="aaa")
    assert answer.status_code == 409, answer.text
    message = answer.json()["error"]["message"]
    assert package_id in message and "another version" in message


def test_the_validation_time_is_the_threads_cpu_time_not_a_stall():
    """Regression (issue 29's CI): the wall clock counted a moment the machine
    left the validating thread without a core, and a valid 3000-unit service
    was refused "validation took too long" before its unit count was checked.
    The budget's seconds are the thread's CPU time: a stall spends none."""
    import threading
    from fornace.api.validationbudget import BudgetExceeded, ValidationBudget
    budget = ValidationBudget(seconds=0.01)
    threading.Event().wait(0.05)            # descheduled for 50 ms: no CPU used
    budget.spend(1, "units[0]")             # still within its 10 ms of work
    busy = ValidationBudget(seconds=0.01)
    with pytest.raises(BudgetExceeded, match="more than 0.01 s"):
        while True:                         # real work runs the budget out
            busy.spend(1, "units[0]")
