"""Constrained decoding from the DSL: a regex, a JSON schema, and typed gens (gen_int, dtype).

Usage:
    python examples/json_decode.py                        # starts a Runtime on the demo model
    python examples/json_decode.py http://127.0.0.1:30000 # or use a running server (also --url)
"""

import json
import re

from example_backend import example_backend

import sgl_lang as sgl

IP_REGEX = r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
CHARACTER_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "house": {"enum": ["Gryffindor", "Slytherin", "Ravenclaw", "Hufflepuff"]},
        "age": {"type": "integer", "minimum": 11, "maximum": 99},
    },
    "required": ["name", "house", "age"],
    "additionalProperties": False,
}


@sgl.function
def server_record(s):
    s += "The address of the Google DNS server is "
    s += sgl.gen("ip", max_tokens=20, regex=IP_REGEX, temperature=0) + ".\n"
    s += "Number of its replicas: " + sgl.gen_int("replicas", max_tokens=6) + "\n"
    s += "Is it public? " + sgl.gen("public", dtype=bool) + "\n"


@sgl.function
def character(s, name):
    s += name + " is a wizard. Their record as JSON: "
    s += sgl.gen("json", max_tokens=64, json_schema=CHARACTER_SCHEMA)


def main() -> None:
    with example_backend(__doc__):
        state = server_record.run()
        print(state.text())
        assert re.fullmatch(IP_REGEX, state["ip"]), state["ip"]
        assert re.fullmatch(sgl.REGEX_INT, state["replicas"]), state["replicas"]
        assert state["public"] in ("True", "False")

        state = character.run(name="Hermione", max_new_tokens=64)
        record = json.loads(state["json"])
        print(record)
        assert set(record) == {"name", "house", "age"} and 11 <= record["age"] <= 99


if __name__ == "__main__":
    main()
