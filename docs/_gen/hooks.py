"""MkDocs hooks: the pages generated from the code, so the site cannot drift from it.

- one page per rule (``reference/rules/CODE.md``) from the rule's own documentation, the text
  ``advise rules CODE`` prints, listed in the navigation under Rules, as ruff's rule pages are;
- ``<!-- advise:rules-table -->``: the catalogue (code, name, summary), as ``advise rules`` lists it;
- ``<!-- advise:fields NAME -->``: a table of a schema's top-level fields with their types and
  descriptions (advisor/schema.py);
- the JSON Schemas themselves (``reference/*.v1.schema.json``), as ``advise schema`` prints them.

The command reference is mkdocs-click's, generated from advisor/commands/cli.py.
"""

from __future__ import annotations

import re

from mkdocs.structure.files import File

RULES_PAGE = "reference/rules/index.md"


def _rules():
    from advisor.rules.registry import load_rules

    catalogue = load_rules()
    return [r for r in catalogue.rules if r.origin == "advise"]


def _rule_page(r) -> str:
    options = ", ".join(f"`{o.key}` = `{o.default!r}`" for o in r.options) or "none"
    return (f"# {r.code} {r.name}\n\n"
            f"Status: {r.status}. Options (defaults): {options}. "
            f"In a terminal: `advise rules {r.code}`. Configure it in "
            f"[`[tool.advise.{r.name}]`](../configuration.md).\n\n{r.doc.rstrip()}\n")


def on_config(config):
    rules = _rules()

    def expand(items):
        for item in items:
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == RULES_PAGE:
                        item[title] = [RULES_PAGE] + [{f"{r.code} {r.name}": f"reference/rules/{r.code}.md"}
                                                      for r in rules]
                    elif isinstance(value, list):
                        expand(value)

    expand(config["nav"])
    return config


def on_files(files, config):
    from advisor.schema import SCHEMAS, schema_text

    for r in _rules():
        files.append(File.generated(config, f"reference/rules/{r.code}.md", content=_rule_page(r)))
    for name, (_, version) in SCHEMAS.items():
        files.append(File.generated(config, f"reference/{name}.v{version}.schema.json", content=schema_text(name)))
    return files


def _type(node: dict, defs: dict) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = defs.get(name, {})
        return "string" if "enum" in target else "object"
    if "anyOf" in node:
        return " or ".join(_type(n, defs) for n in node["anyOf"])
    if "enum" in node:
        return " \\| ".join(f"`{v}`" if isinstance(v, str) else str(v) for v in node["enum"])
    if node.get("type") == "array":
        return f"array of {_type(node.get('items', {}), defs)}"
    return node.get("type", "any")


def _fields(name: str) -> str:
    from advisor.schema import schema

    doc = schema(name)
    defs = doc["$defs"]
    top = defs[doc["$ref"].rsplit("/", 1)[-1]]
    required = set(top.get("required", []))
    rows = ["| field | type | always | what it is |", "|---|---|---|---|"]
    for field, node in top["properties"].items():
        ref = node.get("$ref") or next((n["$ref"] for n in node.get("anyOf", []) if "$ref" in n), "")
        target = defs.get(ref.rsplit("/", 1)[-1], {}) if ref else {}
        text = node.get("description") or target.get("description") or ""
        text = " ".join(text.split()).replace("|", "\\|")
        rows.append(f"| `{field}` | {_type(node, defs)} | {'yes' if field in required else ''} | {text} |")
    return "\n".join(rows)


def _rules_table() -> str:
    rows = ["| code | name | what it flags |", "|---|---|---|"]
    rows += [f"| [{r.code}]({r.code}.md) | `{r.name}` | {r.summary} |" for r in _rules()]
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    markdown = markdown.replace("<!-- advise:rules-table -->", _rules_table())
    return re.sub(r"<!-- advise:fields (\w+) -->", lambda m: _fields(m.group(1)), markdown)


def on_page_content(html, page, config, files):
    # mkdocs-click prints click 8.3's "no default" marker as a value; an option without a default shows none.
    return html.replace("<td><code>Sentinel.UNSET</code></td>", "<td></td>")
