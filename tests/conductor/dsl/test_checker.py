"""The DSL's workflow checker reads no file: it is handed the text and the templates."""
from __future__ import annotations

from fornace.common.errors import TemplateError
from fornace.conductor.dsl.checker import check_source

WORKFLOW = ('<workflow>\n  <rule match="$">\n    <update-cf-stack template="Net"/>\n'
            '    <send-command template="Plan" service="s" unit="u"/>\n  </rule>\n</workflow>\n')


class Templates:
    """Heat templates and plans by name, scripts by name; anything else is missing."""

    def __init__(self, heat: dict, plans: dict, scripts: set[str]) -> None:
        self.heat, self.plans, self.scripts = heat, plans, scripts
        self.asked: list[str] = []

    def heat_template(self, name: str, mappings: dict | None = None) -> dict:
        self.asked.append(f"heat {name}")
        return self._known(self.heat, name)

    def agent_template(self, name: str, mappings: dict | None = None) -> dict:
        self.asked.append(f"plan {name}")
        return self._known(self.plans, name)

    def script(self, name: str) -> bytes:
        self.asked.append(f"script {name}")
        return self._known({s: b"" for s in self.scripts}, name)

    def agent_config(self, name: str) -> str:
        raise AssertionError("the checker reads no agent configuration")

    def init_script(self, name: str) -> str:
        raise AssertionError("the checker reads no init script")

    @staticmethod
    def _known(table: dict, name: str):
        if name not in table:
            raise TemplateError(f"no template {name!r} here")
        return table[name]


def test_templates_come_from_the_lookup_given():
    full = Templates({"Net": {}}, {"Plan": {"Scripts": ["run.sh", "$inline"]}}, {"run.sh"})
    found = check_source(WORKFLOW.encode(), "a.xml", full)
    assert (found.problems, found.warnings) == ([], [])
    assert full.asked == ["heat Net", "plan Plan", "script run.sh"]


def test_what_the_lookup_lacks_is_a_problem_at_the_element():
    empty = Templates({}, {"Plan": {"Scripts": ["gone.sh"]}}, set())
    assert check_source(WORKFLOW.encode(), "a.xml", empty).problems == [
        "a.xml:3: template 'Net': no template 'Net' here",
        "a.xml:4: template 'Plan': no template 'gone.sh' here"]


def test_syntax_errors_and_ignored_entities_are_reported_without_templates():
    broken = check_source(b"<workflow>\n  <rule match='$'>\n</workflow>\n", "b.xml",
                          Templates({}, {}, set()))
    assert len(broken.problems) == 1 and broken.problems[0].startswith("b.xml:")
    assert "XML syntax error" in broken.problems[0]
    doctype = b'<!DOCTYPE workflow [<!ENTITY x "y">]>\n<workflow>&x;</workflow>\n'
    found = check_source(doctype, "c.xml", Templates({}, {}, set()))
    assert found.problems == [] and found.warnings and \
        all(w.startswith("c.xml:") and ": warning: " in w for w in found.warnings)
