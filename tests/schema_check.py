"""A tiny JSON-schema checker for the keywords the tool-call tests use.

`jsonschema` is not a dependency of the app or its tests; this covers exactly: type, const,
enum, properties, required, additionalProperties (bool), items, maxItems, minItems,
maxLength, minLength, minimum, maximum, anyOf. An unknown keyword fails loudly, so a test
cannot silently check less than it claims.
"""

from __future__ import annotations

from typing import Any

KNOWN = {
    "type", "const", "enum", "properties", "required", "additionalProperties", "items",
    "maxItems", "minItems", "maxLength", "minLength", "minimum", "maximum", "anyOf",
    "description",
}  # fmt: skip
TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Why `value` does not satisfy `schema` (empty when it does)."""
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"schema_check does not implement {sorted(unknown)}")
    out: list[str] = []
    if "anyOf" in schema and not any(not errors(value, s, where) for s in schema["anyOf"]):
        out.append(f"{where}: matches no anyOf branch")
    if "type" in schema and not _is_type(value, schema["type"]):
        return [*out, f"{where}: {value!r} is not of type {schema['type']}"]
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                out += errors(v, props[k], f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{where}: unexpected key {k!r}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            out.append(f"{where}: more than {schema['maxItems']} items")
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            out += errors(item, schema.get("items", {}), f"{where}[{i}]")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            out.append(f"{where}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than {schema['minLength']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: {value} > maximum {schema['maximum']}")
    return out


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])
