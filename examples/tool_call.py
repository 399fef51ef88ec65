"""A tool call made and answered end to end over the OpenAI API with the official `openai` SDK.

Usage:
    python examples/tool_call.py                       # starts a local server on the default model
    python examples/tool_call.py --url http://127.0.0.1:30000   # against a running server

The model is asked about the weather, calls `get_weather` (tool_choice "required": its arguments
are valid for the schema by construction), the program runs the tool, sends the result back as a
`role: tool` message, and the model answers in text.
"""

from __future__ import annotations

import argparse
import json

import openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 30},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]


def get_weather(city: str, unit: str) -> dict:
    return {"city": city, "temperature": 18 if unit == "celsius" else 64, "unit": unit, "sky": "sunny"}


def converse(client: openai.OpenAI, model: str, max_tokens: int = 96) -> tuple[dict, str]:
    messages = [{"role": "user", "content": "What's the weather in Paris? Use celsius."}]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", max_tokens=max_tokens, temperature=0
    )
    call = first.choices[0].message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    result = get_weather(**arguments)
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)},
    ]
    answer = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, max_tokens=max_tokens, temperature=0
    )
    return {"name": call.function.name, "arguments": arguments, "result": result}, answer.choices[0].message.content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one on the default model)")
    parser.add_argument("--model-path", help="model for the local server (default: the default demo model)")
    args = parser.parse_args()
    runtime = None
    if args.url is None:
        import sgl_lang as sgl

        runtime = sgl.Runtime(model_path=args.model_path, tool_call_parser="qwen25")  # hermes-style calls
        args.url = runtime.url
    try:
        client = openai.OpenAI(base_url=f"{args.url}/v1", api_key="none")
        call, answer = converse(client, client.models.list().data[0].id)
        print("Tool call:", json.dumps(call))
        print("Answer:   ", answer)
    finally:
        if runtime is not None:
            runtime.shutdown()


if __name__ == "__main__":
    main()
