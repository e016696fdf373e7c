"""Evaluated content and the value functions of the DSL.

Murano 0.2: text and child results that are all strings are joined
(stripped when there were child elements); exactly one non-string result
(``None`` included) is returned as is, dropping the text; several
non-strings give a list.  Plain text without children is kept as it is.
"""
from __future__ import annotations

import pytest

from fornace.common.errors import WorkflowError
from enginekit import evaluate


# ------------------------------------------------------------ content rules

def test_strings_joined_and_stripped_when_there_were_children():
    xml = "<text>  Hello, <text>big</text> <text>world</text>!  \n</text>"
    assert evaluate(xml) == "Hello, big world!"


def test_plain_text_without_children_is_not_stripped():
    assert evaluate("<text>  padded \n</text>") == "  padded \n"


def test_plain_text_not_stripped_through_set(catalog):
    assert catalog.capture("  two spaces  ") == "  two spaces  "


def test_single_string_child_is_stripped(catalog):
    model = {"id": "E", "s": "  inner  "}
    assert catalog.capture('\n   <select path="s"/>\n', model) == "inner"


def test_single_non_string_returned_as_is_and_text_dropped(catalog):
    assert catalog.capture("Count: <int>5</int> items") == 5


def test_none_counts_as_non_string(catalog):
    out = catalog.capture('Unit <select path="missing"/>', {"id": "E"})
    assert out is None


def test_none_inside_text_yields_none_not_text():
    assert evaluate('<text>Unit <select path="missing"/></text>') == "None"


def test_several_non_strings_make_a_list_and_drop_strings():
    value = evaluate('<list><item>a <true/> b <int>3</int> <null/> c</item></list>')
    assert value == [[True, 3, None]]


def test_non_strings_keep_order_with_string_children_dropped():
    value = evaluate('<list><item><int>1</int><text>x</text><false/></item></list>')
    assert value == [[1, False]]


def test_single_dict_child_keeps_identity(catalog):
    model = {"id": "E", "obj": {"k": "v"}}
    out = catalog.capture('<select path="obj"/>', model)
    assert out == {"k": "v"}


# ------------------------------------------------------------ constants

@pytest.mark.parametrize("tag, expected", [("true", True), ("false", False), ("null", None)])
def test_constants(tag, expected):
    assert evaluate(f"<{tag}/>") is expected


def test_constants_stored_with_their_type(catalog):
    out = catalog.capture('<map><item name="t"><true/></item><item name="f"><false/></item>'
                          '<item name="n"><null/></item></map>')
    assert out == {"t": True, "f": False, "n": None}
    assert out["t"] is True and out["f"] is False


# ------------------------------------------------------------ text and int

def test_text_of_none_is_None_string():
    assert evaluate('<text><select path="nothing"/></text>') == "None"


def test_text_of_int_and_bool():
    assert evaluate("<text><int>42</int></text>") == "42"
    assert evaluate("<text><true/></text>") == "True"


def test_text_of_list_is_python_repr():
    assert evaluate("<text><list><item>a</item><item><int>1</int></item></list></text>") \
        == "['a', 1]"


@pytest.mark.parametrize("xml, expected", [
    ("<int>42</int>", 42),
    ("<int>  -7 \n</int>", -7),
    ("<int><true/></int>", 1),
    ("<int><false/></int>", 0),
    ("<int><text>12</text></int>", 12),
])
def test_int(xml, expected):
    value = evaluate(xml)
    assert value == expected and type(value) is int


def test_int_of_select(catalog):
    assert catalog.capture('<int><select path="n"/></int>', {"id": "E", "n": "17"}) == 17


def test_int_of_garbage_is_an_error():
    with pytest.raises(WorkflowError, match="'abc' is not an integer") as info:
        evaluate("<int>abc</int>")
    assert info.value.file == "inline.xml" and info.value.line == 1


def test_int_of_none_is_an_error():
    with pytest.raises(WorkflowError, match="not an integer"):
        evaluate('<int><select path="missing"/></int>')


# ------------------------------------------------------------ list and map

def test_list_items_any_tag_name_and_types():
    value = evaluate("<list><item>item1</item><entry>item2</entry><x><true/></x></list>")
    assert value == ["item1", "item2", True]


def test_empty_list_and_map():
    assert evaluate("<list/>") == []
    assert evaluate("<map/>") == {}


def test_list_items_keep_plain_text_unstripped():
    assert evaluate("<list><item> a </item></list>") == [" a "]


def test_map_items_any_tag_name():
    value = evaluate('<map><item name="key1">value1</item><set name="key2"><null/></set></map>')
    assert value == {"key1": "value1", "key2": None}


def test_map_key_from_parameter():
    xml = ('<map><item>v<parameter name="name">k-<text>1</text></parameter></item></map>')
    assert evaluate(xml) == {"k-1": "v"}


def test_text_after_a_parameter_is_not_content():
    # 0.2 skips a <parameter> together with its tail when building content
    xml = '<map><item>a<parameter name="name">k</parameter>b</item></map>'
    assert evaluate(xml) == {"k": "a"}


def test_map_key_of_non_string_is_text():
    xml = '<map><item>x<parameter name="name"><int>3</int></parameter></item></map>'
    assert evaluate(xml) == {"3": "x"}


def test_map_item_without_name_is_an_error():
    with pytest.raises(WorkflowError, match="has no name"):
        evaluate("<map>\n<item>v</item></map>")


def test_nested_structures():
    xml = """<list>
      <item><map><item name="name 1">value 1</item><item name="name 2">value 2</item></map></item>
      <item><map><item name="name 1">value 3</item><item name="name 2">value 4</item></map></item>
    </list>"""
    assert evaluate(xml) == [{"name 1": "value 1", "name 2": "value 2"},
                             {"name 1": "value 3", "name 2": "value 4"}]


def test_map_values_from_model(catalog):
    model = {"id": "E", "a": {"b": [10, 20]}}
    out = catalog.capture('<map><item name="x"><select path="a.b.1"/></item>'
                          '<item name="y">pre <select path="a.b.0"/></item></map>', model)
    assert out == {"x": 20, "y": 10}


# ------------------------------------------------------------ function

def test_function_is_resolved_when_stored(catalog):
    out = catalog.capture('<function><text>late</text></function>')
    assert out == "late"


def test_function_inside_map_resolved_by_set(catalog):
    out = catalog.capture('<map><item name="k"><function><int>4</int></function></item></map>')
    assert out == {"k": 4}


def test_function_evaluates_body_when_called_not_when_built():
    from fornace.conductor.dsl.deferred import Deferred
    model = {"id": "E", "v": "before"}
    value = evaluate('<function><select path="v"/></function>', model)
    assert isinstance(value, Deferred)
    model["v"] = "after"
    assert value() == "after"
