#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Extracts the schemas of the official JSON-Schema-Test-Suite that the structured-output tests
use, from the copy vendored in the `jsonschema` sdist on PyPI (jsonschema-X.tar.gz/json/tests).

    pip download --no-deps --no-binary :all: jsonschema==4.26.0   # the sdist
    python3 tests/data/grammar/build_official_suite.py jsonschema-4.26.0.tar.gz > tests/data/grammar/official_suite.jsonl

Only the schemas of keyword files whose keywords the engine implements are taken (see KEYWORD_FILES);
schemas with remote references are dropped. Each line: {"name", "source", "schema"}.
"""
import json
import sys
import tarfile

KEYWORD_FILES = {
    "draft2020-12": ["additionalProperties", "allOf", "anyOf", "boolean_schema", "const", "enum", "exclusiveMaximum",
                     "exclusiveMinimum", "items", "maxItems", "maxLength", "maximum", "minItems", "minLength",
                     "minimum", "oneOf", "pattern", "prefixItems", "properties", "ref", "required", "type", "default",
                     "optional/format/date", "optional/format/time", "optional/format/date-time",
                     "optional/format/email", "optional/format/uuid", "optional/format/ipv4", "optional/format/uri"],
    "draft7": ["additionalItems", "additionalProperties", "allOf", "anyOf", "const", "enum", "items", "maxItems",
               "maxLength", "maximum", "minItems", "minLength", "minimum", "oneOf", "pattern", "properties",
               "ref", "required", "type", "definitions"],
}


def main() -> None:
    tar = tarfile.open(sys.argv[1])
    members = {m.name.split("/json/tests/", 1)[1]: m for m in tar.getmembers() if "/json/tests/" in m.name}
    seen = set()
    for draft, files in KEYWORD_FILES.items():
        for f in files:
            m = members.get(f"{draft}/{f}.json")
            if m is None:
                continue
            groups = json.load(tar.extractfile(m))
            for i, g in enumerate(groups):
                schema = g["schema"]
                text = json.dumps(schema, sort_keys=True)
                if "http" in json.dumps(schema) and "$ref" in text or text in seen:
                    continue
                if not isinstance(schema, dict):
                    continue
                seen.add(text)
                print(json.dumps({"name": f"{draft}/{f}#{i}", "source": g["description"], "schema": schema}))


if __name__ == "__main__":
    main()
