"""A workflow package deployed by version: refused while broken, fixed, moved to.

The must-show of workflow packages: an environment pinned to ``greet 1.0.0``
deploys with that package's rule; ``1.0.1`` with a broken rule is refused
with file:line; the fixed ``1.0.1`` is accepted, yet the environment keeps
running 1.0.0 until it is moved (the plan shows the change first); after the
move the next deployment runs 1.0.1 on the same conductor, never restarted.
A version an environment uses cannot be deleted.
"""
from __future__ import annotations

import json
from pathlib import Path

from clikit import as_json, ok
from packagekit import write_folder

RULE = """<?xml version="1.0"?>
<workflow>
    <rule match="$[?(not @.deleted and not @.temp.greeted)]" desc="Greet once per deployment">
        <set path="temp.greeted"><true/></set>
        <report entity="environment">
            <parameter name="id"><select path="id"/></parameter>
            <parameter name="text">{text}</parameter>
        </report>
    </rule>
</workflow>
"""
BROKEN = RULE.replace('<set path="temp.greeted"><true/></set>',
                      '<set path="temp.greeted"><no-such-function/></set>')


def greet(root: Path, version: str, rule: str) -> Path:
    return write_folder(root / f"greet-{version}", {
        "package.json": json.dumps({"name": "greet", "version": version,
                                    "description": "says which version runs"}).encode(),
        "workflows/Greet.xml": rule.encode()})


def deployed_reports(cli, env: str) -> list[str]:
    """Deploy ``env`` as it is (followed to its end); its reports' texts."""
    done = as_json(cli("deploy", env, "--json"))
    assert done["job"]["state"] == "success", done
    return [r["text"] for r in done["reports"]]


def test_a_fixed_package_is_used_by_the_next_deployment_without_a_restart(box, cli, tmp_path):
    conductor = box.conductor
    ok(cli("package", "upload", str(greet(tmp_path, "1.0.0", RULE.format(
        text="greetings from greet 1.0.0")))))
    ok(cli("env", "create", "greeted"))
    first = ok(cli("package", "use", "greeted", "greet", "--yes"))
    assert "start using greet 1.0.0" in first and "+ workflows/Greet.xml" in first, first
    assert any("greetings from greet 1.0.0" in t for t in deployed_reports(cli, "greeted"))

    # a broken rule is refused with its file and line
    broken = cli("package", "upload", str(greet(tmp_path / "b", "1.0.1", BROKEN)))
    assert broken.returncode == 2, broken
    assert "workflows/Greet.xml:4:" in broken.stderr and "no-such-function" in broken.stderr

    ok(cli("package", "upload", str(greet(tmp_path, "1.0.1", RULE.format(
        text="greetings from greet 1.0.1")))))
    [pin] = as_json(cli("package", "pins", "greeted", "--json"))["packages"]
    assert (pin["version"], pin["newest"]) == ("1.0.0", "1.0.1")
    plan = ok(cli("package", "use", "greeted", "greet", "--plan"))
    assert "greet 1.0.0 -> 1.0.1" in plan and "~ workflows/Greet.xml" in plan, plan
    assert "-            <parameter name=\"text\">greetings from greet 1.0.0" in plan, plan
    assert "+            <parameter name=\"text\">greetings from greet 1.0.1" in plan, plan

    # pinned: the new version waits for the move
    texts = deployed_reports(cli, "greeted")
    assert any("greet 1.0.0" in t for t in texts) and not any("1.0.1" in t for t in texts)

    moved = as_json(cli("package", "use", "greeted", "greet@1.0.1", "--yes", "--json"))
    assert moved["moved"] and moved["to"]["version"] == "1.0.1"
    texts = deployed_reports(cli, "greeted")
    assert any("greetings from greet 1.0.1" in t for t in texts), texts
    assert box.conductor is conductor and all(t.is_alive() for t in conductor._threads)

    # 1.0.0 is unused now; 1.0.1 is the environment's
    ok(cli("package", "delete", "greet@1.0.0", "--yes"))
    used = cli("package", "delete", "greet@1.0.1", "--yes")
    assert used.returncode != 0 and "used by environments greeted" in used.stderr, used.stderr
    ok(cli("package", "unpin", "greeted", "greet", "--yes"))
    ok(cli("package", "delete", "greet@1.0.1", "--yes"))
