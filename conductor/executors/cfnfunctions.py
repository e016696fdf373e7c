"""The CloudFormation intrinsic functions the local cloud evaluates, minimally.

A template's instances (``AWS::EC2::Instance`` / ``OS::Nova::Server``
resources) and their user data (a string, ``Fn::Base64`` of one or
``Fn::Join`` of strings), and its outputs: ``Fn::GetAtt [instance,
PrivateIp|PublicIp]`` (and HOT ``get_attr`` ``first_address``) give the
instance's address, ``Ref`` / ``get_resource`` of an instance its resource
name, ``Ref`` / ``get_param`` of a parameter its value (given, else its
default), literals themselves, any other function None.  Pure: the
addresses are handed in.
"""
from __future__ import annotations

from typing import Any, Mapping

INSTANCE_TYPES = frozenset({"AWS::EC2::Instance", "OS::Nova::Server"})
ADDRESS_ATTRIBUTES = frozenset({"PrivateIp", "PublicIp", "first_address", "accessIPv4"})


def instance_resources(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    resources = template.get("Resources") or template.get("resources") or {}
    if not isinstance(resources, dict):
        return {}
    return {name: res for name, res in resources.items()
            if isinstance(res, dict) and res.get("Type", res.get("type")) in INSTANCE_TYPES}


def instance_user_data(resource: dict[str, Any]) -> str | None:
    props = resource.get("Properties") or resource.get("properties") or {}
    if not isinstance(props, dict):
        return None
    value = props.get("UserData", props.get("user_data"))
    return plain_text(value)


def plain_text(value: Any) -> str | None:
    """A string, ``Fn::Base64`` of one, or ``Fn::Join`` of strings; else None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Fn::Base64":
            return plain_text(arg)
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 \
                and isinstance(arg[0], str) and isinstance(arg[1], list):
            parts = [plain_text(p) for p in arg[1]]
            if all(p is not None for p in parts):
                return arg[0].join(parts)  # type: ignore[arg-type]
    return None


def evaluate_outputs(template: dict[str, Any], instances: Mapping[str, str],
                     parameters: dict[str, Any]) -> dict[str, Any]:
    """The template's outputs; ``instances`` maps instance names to addresses."""
    outputs = template.get("Outputs") or template.get("outputs") or {}
    if not isinstance(outputs, dict):
        return {}
    params = {}
    declared = template.get("Parameters") or template.get("parameters") or {}
    if isinstance(declared, dict):
        for key, spec in declared.items():
            if isinstance(spec, dict):
                default = spec.get("Default", spec.get("default"))
                if default is not None:
                    params[key] = default
    params.update(parameters or {})
    result = {}
    for key, spec in outputs.items():
        value = spec.get("Value", spec.get("value")) if isinstance(spec, dict) else None
        result[key] = _evaluate(value, instances, params)
    return result


def _evaluate(value: Any, instances: Mapping[str, str], params: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key in ("Fn::GetAtt", "get_attr"):
                if isinstance(arg, list) and len(arg) >= 2 and arg[0] in instances \
                        and arg[1] in ADDRESS_ATTRIBUTES:
                    return instances[arg[0]]
                return None
            if key in ("Ref", "get_resource", "get_param"):
                if isinstance(arg, str) and key != "get_param" and arg in instances:
                    return arg
                if isinstance(arg, str) and key != "get_resource":
                    return params.get(arg)
                return None
            if key.startswith("Fn::") or key in ("get_file", "str_replace", "list_join"):
                return None
        return {k: _evaluate(v, instances, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_evaluate(v, instances, params) for v in value]
    return value
