"""Loading untrusted workflow files and template names safely."""
from __future__ import annotations

import pytest

from fornace.common.errors import ExpressionError, TemplateError, WorkflowError
from fornace.conductor.templates import TemplateStore, safe_join
from fornace.conductor.workflowfiles import load_workflow, load_workflows
from enginekit import UNITS


def load_error(catalog, xml: str, name: str = "bad.xml") -> WorkflowError:
    path = catalog.workflow(xml, name)
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    error = info.value
    assert error.file == str(path)
    return error


# ------------------------------------------------------------ unknown functions

def test_unknown_function_named_with_file_and_line(catalog):
    error = load_error(catalog, '<workflow>\n<rule match="$">\n\n  <frobnicate/>\n</rule>'
                                '</workflow>')
    assert error.line == 4
    assert "unknown function <frobnicate>" in str(error)
    assert str(error).startswith(f"{error.file}:4: ")


@pytest.mark.parametrize("where", [
    '<parameter name="mappings"><map><item name="a"><bogus/></item></map></parameter>',
    '<success>\n<bogus/></success>',
    '<failure><set path="x"><bogus/></set></failure>',
])
def test_unknown_function_in_bodies_found_at_load(catalog, where):
    xml = (f'<workflow>\n<rule match="{UNITS}">\n<send-command template="T" service="s" '
           f'unit="u">{where}</send-command></rule></workflow>')
    error = load_error(catalog, xml)
    assert "<bogus>" in str(error) and error.line in (3, 4)


def test_unknown_function_in_empty_block_found_at_load(catalog):
    error = load_error(catalog, '<workflow><rule match="$.x">\n<empty>\n<nope/></empty></rule>'
                                '</workflow>')
    assert error.line == 3 and "<nope>" in str(error)


def test_load_workflows_fails_on_first_bad_file(catalog):
    catalog.rules('<rule match="$"><report text="ok"/></rule>', "a.xml")
    catalog.rules('<rule match="$">\n<bad-tag/></rule>', "b.xml")
    with pytest.raises(WorkflowError, match=r"b\.xml:3: unknown function <bad-tag>"):
        load_workflows(catalog.workflows)


def test_collecting_errors_reports_them_all(catalog):
    path = catalog.rules('<rule match="$">\n<one/>\n<two/></rule>')
    errors: list = []
    assert load_workflow(path, errors) is None
    assert [(e.line, "<one>" in e.message or "<two>" in e.message) for e in errors] \
        == [(3, True), (4, True)]


def test_root_must_be_workflow(catalog):
    error = load_error(catalog, "<rules>\n</rules>")
    assert "root element must be <workflow>" in str(error) and error.line == 1


def test_empty_outside_rule_is_an_error(catalog):
    catalog.rules('<empty/>')
    run = catalog.run()
    assert run.status == "error" and "only allowed directly inside a <rule>" in run.errors[0]


def test_rule_without_match_or_with_dotted_id(catalog):
    assert "needs a match" in str(load_error(catalog, "<workflow>\n<rule id='r'/></workflow>"))
    error = load_error(catalog, "<workflow>\n<rule id='a.b' match='$'/></workflow>")
    assert "must not contain '.'" in str(error) and error.line == 2


def test_parameter_without_name(catalog):
    error = load_error(catalog, "<workflow><rule match='$'>\n<set><parameter>x</parameter>"
                                "</set></rule></workflow>")
    assert "without a name" in str(error) and error.line == 2


def test_namespaced_element_is_refused(catalog):
    error = load_error(catalog, '<workflow xmlns:x="urn:x">\n<x:rule match="$"/></workflow>')
    assert error.line == 2 and "namespaced" in str(error)


# ------------------------------------------------------------ XML safety

def test_external_entity_is_not_expanded(catalog, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-MARKER")
    xml = (f'<?xml version="1.0"?>\n<!DOCTYPE workflow [\n'
           f'  <!ENTITY x SYSTEM "file://{secret}">\n'
           f'  <!ENTITY p SYSTEM "file:///etc/passwd">\n]>\n'
           '<workflow>\n<rule match="$"><set path="out">&x;</set>'
           '<set path="pw">&p;</set><report>&x;&p;</report></rule>\n</workflow>')
    catalog.workflow(xml)
    run = catalog.run()
    assert run.status == "success", run.reports
    everything = repr(run.model) + repr(run.reports) + repr(run.trace.rounds)
    assert "TOP-SECRET-MARKER" not in everything
    assert "root:" not in everything
    assert run.model["out"] in ("", None)


def test_internal_entity_bomb_does_not_explode(catalog):
    entities = '<!ENTITY a "aaaaaaaaaa">' + "".join(
        f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(8))
    xml = (f'<!DOCTYPE workflow [{entities}]>\n'
           '<workflow><rule match="$"><set path="out">&i;</set></rule></workflow>')
    path = catalog.workflow(xml)
    # 10^9 characters if expanded: the parser refuses it, naming the file (not a
    # silent empty value, not a run that would fill memory)
    with pytest.raises(WorkflowError, match="amplification") as refused:
        load_workflow(path)
    assert refused.value.file == str(path)


def test_malformed_xml_names_file_and_line(catalog):
    error = load_error(catalog, '<workflow>\n<rule match="$">\n  <set path="x">1</set>\n'
                                '</workflow>\n')
    assert error.line == 4
    assert "XML syntax error" in str(error)
    assert str(error).startswith(f"{error.file}:4: ")


def test_unclosed_attribute_quote(catalog):
    error = load_error(catalog, '<workflow>\n\n<rule match="$></rule></workflow>')
    assert error.line is not None and error.line >= 3


def test_not_xml_at_all(catalog):
    error = load_error(catalog, "just text")
    assert "XML syntax error" in str(error) and error.line == 1


def test_comments_are_ignored_in_content(catalog):
    catalog.rules('<rule match="$"><set path="out">a<!-- hidden -->b</set>'
                  '<set path="out2"><!-- c --><int>4</int><!-- d --></set></rule>')
    run = catalog.run({"id": "E"})
    assert run.model["out"] == "ab" and run.model["out2"] == 4


def test_missing_workflow_folder(tmp_path):
    with pytest.raises(WorkflowError, match="workflow folder not found"):
        load_workflows(tmp_path / "nowhere")


# ------------------------------------------------------------ template names

@pytest.mark.parametrize("name", ["../secret", "a/../../b", "/etc/passwd", "..", "~root/x",
                                  "a\\..\\b", "", "  "])
def test_unsafe_template_names_refused(tmp_path, name):
    store = TemplateStore(tmp_path, fallback=None)
    with pytest.raises(TemplateError,
                       match=r"^(empty template name|template name .* must stay inside )"):
        store.heat_template(name)
    with pytest.raises(TemplateError,
                       match=r"^(empty template name|template name .* must stay inside )"):
        store.agent_template(name)
    with pytest.raises(TemplateError,
                       match=r"^(empty template name|template name .* must stay inside )"):
        store.script(name)


def test_safe_template_names_allowed(tmp_path):
    assert safe_join(tmp_path, "Linux/Deploy", ".template") \
        == tmp_path / "Linux" / "Deploy.template"
    assert safe_join(tmp_path, "a..b") == tmp_path / "a..b"


def test_template_name_escaping_through_a_deployment(catalog, tmp_path):
    (tmp_path / "x.template").write_text('{"Scripts": [], "Commands": []}')
    catalog.rules(f'<rule match="{UNITS}"><mute/><send-command template="../../../x" '
                  'service="s"><parameter name="unit"><select path="id"/></parameter>'
                  '</send-command></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert "must stay inside" in run.errors[0]
    assert run.agents.plans == []


def test_script_name_escaping_is_refused(catalog, tmp_path):
    (tmp_path / "stolen.ps1").write_text("secret script")
    catalog.agent("Tpl", scripts=("../../../../stolen.ps1",))
    catalog.rules(f'<rule match="{UNITS}"><mute/><send-command template="Tpl" service="s">'
                  '<parameter name="unit"><select path="id"/></parameter></send-command></rule>')
    run = catalog.run()
    assert run.status == "error" and "must stay inside" in run.errors[0]
    assert run.agents.plans == []


def test_scripts_must_be_a_list_of_names(catalog):
    catalog.file("templates/agent/Tpl.template", '{"Scripts": "one.ps1", "Commands": []}')
    catalog.rules(f'<rule match="{UNITS}"><mute/><send-command template="Tpl" service="s">'
                  '<parameter name="unit"><select path="id"/></parameter></send-command></rule>')
    run = catalog.run()
    assert run.status == "error" and "Scripts must be a list" in run.errors[0]


def test_template_must_be_an_object(catalog):
    catalog.file("templates/cf/List.template", "[1, 2]")
    catalog.rules('<rule match="$"><mute/><update-cf-stack template="List"/></rule>')
    run = catalog.run()
    assert run.status == "error" and "must be a JSON object" in run.errors[0]


# ------------------------------------------------------------ filter expressions

@pytest.mark.parametrize("expression, reason", [
    ("@.type = 'x'", "assignment"),
    ("__import__('os').system('true')", ""),
    ("@.a + 1 == 2", "arithmetic"),
    ("@.name.upper() == 'X'", ""),
])
def test_bad_filter_in_match_names_expression_and_location(catalog, expression, reason):
    match = f"$.services[?({expression})]"
    xml = f'<workflow>\n<rule match="{_attr(match)}"><report text="x"/></rule></workflow>'
    error = load_error(catalog, xml)
    assert isinstance(error, ExpressionError)
    assert error.line == 2
    assert repr(match) in str(error) or match in str(error)
    assert reason in str(error)


def test_bad_filter_in_select_all_found_at_load(catalog):
    xml = ('<workflow>\n<rule match="$">\n<set path="x">'
           '<select-all path="$.services[?(@.a ! 1)]"/></set></rule></workflow>')
    error = load_error(catalog, xml)
    assert isinstance(error, ExpressionError) and error.line == 3


def test_bad_filter_built_at_run_time_is_an_error_report(catalog):
    path = catalog.rules('<rule id="dyn">\n<parameter name="match">$.services[?(@.type '
                         '<text>=</text> 1)]</parameter><report text="x"/></rule>')
    run = catalog.run()
    assert run.status == "error"
    [error] = run.errors
    assert f"{path}:2" in error
    assert "$.services[?(@.type = 1)]" in error


@pytest.mark.parametrize("match", ["$.services[(@.length-1)]", "$.a[?@.b]", "$.a[", "$..",
                                   "$.services[?(@.type == 'x']"])
def test_unsupported_or_broken_jsonpath(catalog, match):
    xml = f'<workflow>\n<rule match="{_attr(match)}"/></workflow>'
    error = load_error(catalog, xml)
    assert isinstance(error, ExpressionError) and error.line == 2


def test_filters_never_run_code(catalog, tmp_path):
    marker = tmp_path / "pwned"
    match = f"$.services[?(__import__('os').system('touch {marker}'))]"
    catalog.workflow(f'<workflow><rule match="{_attr(match)}"/></workflow>')
    with pytest.raises(ExpressionError, match="dunder name '__import__' is not allowed"):
        load_workflows(catalog.workflows)
    assert not marker.exists()


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
