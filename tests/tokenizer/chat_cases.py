#!/usr/bin/python3
"""Chat-completions bodies for the template parity tests (issue 16): one JSON line each.

System prompts, multi-turn, tools, tool calls (arguments as JSON strings, as OpenAI sends
them, and already objects), tool results, null content, content parts, reasoning and
<think> blocks, enable_thinking, add_generation_prompt on and off, continue_final_message,
unicode, and conversations some templates reject (their error must be kvgate's too).
"""
import json

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer",
                                                                         "default": 10}}}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}
CALL2 = {"id": "call_2", "type": "function",
         "function": {"name": "search", "arguments": {"q": "météo été", "limit": 3}}}


def main():
    sys_msg = {"role": "system", "content": "You are a helpful assistant. Réponds en français."}
    user = {"role": "user", "content": "What's the weather in Paris?"}
    cases = [
        {"messages": [user]},
        {"messages": [user], "add_generation_prompt": False},
        {"messages": [sys_msg, user]},
        {"messages": [sys_msg, user, {"role": "assistant", "content": "Il fait beau."},
                      {"role": "user", "content": "Et demain ? 明天呢？ 🌦️"}]},
        {"messages": [user, {"role": "assistant", "content": "  padded answer \n"},
                      {"role": "user", "content": "\n\nleading newlines"}]},
        {"messages": [sys_msg, user], "tools": [WEATHER, SEARCH]},
        {"messages": [user], "tools": [WEATHER]},
        {"messages": [sys_msg, user,
                      {"role": "assistant", "content": None, "tool_calls": [CALL]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
                      ], "tools": [WEATHER]},
        {"messages": [user, {"role": "assistant", "content": "Let me check.",
                             "tool_calls": [CALL, CALL2]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
                      {"role": "tool", "tool_call_id": "call_2", "content": "[]"},
                      {"role": "assistant", "content": "It is 18°C."},
                      {"role": "user", "content": "Thanks"}], "tools": [WEATHER, SEARCH]},
        {"messages": [user, {"role": "assistant", "content": "", "tool_calls": []}]},
        {"messages": [user, {"role": "assistant",
                             "content": "<think>\nThe user asks about weather.\n</think>\n\nSunny."},
                      {"role": "user", "content": "And tomorrow?"}]},
        {"messages": [user, {"role": "assistant", "content": "Sunny.",
                             "reasoning": "They want the forecast."},
                      {"role": "user", "content": "More?"}]},
        {"messages": [user], "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [user], "chat_template_kwargs": {"enable_thinking": True}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                   {"type": "text", "text": "part two"}]}]},
        {"messages": [{"role": "system", "content": [{"type": "text", "text": "sys part"}]},
                      {"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"messages": [user, {"role": "assistant", "content": "Partial ans"}],
         "continue_final_message": True, "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "名前は？ 이름이 뭐예요? Как тебя зовут?\r\n\ttab"}]},
        {"messages": [{"role": "user", "content": "code:\n```python\nprint('hi')\n```\n"},
                      {"role": "assistant", "content": "```\n$ ls -la\n```"},
                      {"role": "user", "content": "<|im_start|> and <|eot_id|> typed by a user"}]},
        {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
        {"messages": [{"role": "assistant", "content": "assistant first"}]},
        {"messages": [sys_msg, {"role": "system", "content": "second system"}, user]},
        {"messages": [{"role": "user", "content": "hi", "name": "alice"}]},
        {"messages": [user, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "search", "arguments": "not json"}}]},
                      {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "r1"},
                                                                          {"type": "text", "text": "r2"}]}]},
        {"messages": [{"role": "user", "content": "x" * 3000 + " long"},
                      {"role": "assistant", "content": "y " * 800},
                      {"role": "user", "content": "z"}]},
    ]
    for c in cases:
        print(json.dumps(c, ensure_ascii=False))


if __name__ == "__main__":
    main()
