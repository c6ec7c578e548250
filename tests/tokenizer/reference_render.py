#!/usr/bin/python3
"""Reference chat-template renders for kvgate's parity tests (issue 16), with Debian's
python3-jinja2 in the environment transformers builds for chat templates (an immutable
sandbox, trim_blocks, lstrip_blocks, loop controls, a {% generation %} tag, tojson as
json.dumps with ensure_ascii=False, raise_exception, strftime_now), after normalising the
OpenAI messages as vLLM's chat_utils does.

  reference_render.py DIR [--template FILE] < bodies.jsonl

DIR holds tokenizer_config.json (chat_template, special tokens) and optionally
chat_template.jinja. Writes {"rendered": "..."} or {"error": "..."} per input line.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body in place."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def iterates_content(ast):
    """vLLM's content-format detection: a for loop over <name>['content'] or <name>.content."""
    for loop in ast.find_all(nodes.For):
        it = loop.iter
        if isinstance(it, nodes.Getitem) and isinstance(it.arg, nodes.Const) \
                and it.arg.value == "content" and isinstance(it.node, nodes.Name):
            return True
        if isinstance(it, nodes.Getattr) and it.attr == "content" and isinstance(it.node, nodes.Name):
            return True
    return False


TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
             "thinking": "thinking"}


def normalize(messages, openai):
    """vLLM's _parse_chat_message_content and _postprocess_messages for text models."""
    out = []
    for m in messages:
        role = m["role"]
        content = m.get("content")
        if content is None:
            content = []
        elif isinstance(content, str):
            content = [{"type": "text", "text": content}]
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            key = TEXT_KEYS.get(part.get("type"))
            if key is None:
                raise ValueError("non-text content part")
            if part.get(key) is None:
                continue
            texts.append(part[key])
        msg = {"role": role}
        msg["content"] = [{"type": "text", "text": t} for t in texts] if openai else "\n".join(texts)
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = list(m["tool_calls"])
            if m.get("reasoning") is not None:
                msg["reasoning"] = m["reasoning"]
                msg["reasoning_content"] = m["reasoning"]
        elif role == "tool":
            if "tool_call_id" in m:
                msg["tool_call_id"] = m["tool_call_id"]
            if isinstance(msg["content"], list):
                msg["content"] = "\n".join(i.get("text", "") for i in msg["content"])
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        if role == "developer":
            msg["tools"] = m.get("tools")
        out.append(msg)
    for msg in out:
        if msg["role"] == "assistant" and "tool_calls" in msg:
            calls = msg["tool_calls"]
            if len(calls) == 0:
                msg.pop("tool_calls")
                continue
            fixed = []
            for call in calls:
                call = dict(call)
                fn = call.get("function")
                if isinstance(fn, dict):
                    fn = dict(fn)
                    args = fn.get("arguments")
                    if isinstance(args, str):
                        try:
                            fn["arguments"] = json.loads(args)
                        except json.JSONDecodeError:
                            fn["arguments"] = {}
                    elif not isinstance(args, (dict, list)):
                        fn["arguments"] = {}
                    call["function"] = fn
                fixed.append(call)
            msg["tool_calls"] = fixed
    return out


def dump_tool(t):
    """ChatCompletionToolsParam(...).model_dump()."""
    fn = t["function"]
    f = {"name": fn["name"], "description": fn.get("description"),
         "parameters": fn.get("parameters")}
    f.update({k: v for k, v in fn.items() if k not in f})
    d = {"type": t.get("type", "function"), "function": f}
    d.update({k: v for k, v in t.items() if k not in d})
    return d


def special_tokens(cfg):
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    extra = [e if isinstance(e, str) else e.get("content")
             for e in cfg.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def main():
    import os
    args = sys.argv[1:]
    model_dir = args[0]
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
    source = cfg.get("chat_template")
    if isinstance(source, list):
        source = next((e["template"] for e in source if e.get("name") == "default"), None)
    jinja_path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(jinja_path):
        source = open(jinja_path, encoding="utf-8").read()
    if "--template" in args:
        source = open(args[args.index("--template") + 1], encoding="utf-8").read()
    env = make_env()
    template = env.from_string(source)
    openai = iterates_content(env.parse(source))
    specials = special_tokens(cfg)
    for line in sys.stdin.read().split("\n"):
        if not line:
            continue
        body = json.loads(line)
        try:
            conversation = normalize(body["messages"], openai)
            tools = None if body.get("tools") is None else [dump_tool(t) for t in body["tools"]]
            continue_final = body.get("continue_final_message", False)
            add_generation = body.get("add_generation_prompt", not continue_final)
            kwargs = {**specials, **(body.get("chat_template_kwargs") or {})}
            rendered = template.render(messages=conversation, tools=tools,
                                       documents=body.get("documents"),
                                       add_generation_prompt=add_generation, **kwargs)
            if continue_final:
                final = conversation[-1]["content"]
                if isinstance(final, list):
                    final = final[-1]["text"]
                try:
                    rendered = rendered[: rendered.rindex(final) + len(final)]
                except ValueError:
                    rendered = rendered[: rendered.rindex(final.strip()) + len(final.strip())]
            print(json.dumps({"rendered": rendered}, ensure_ascii=False))
        except Exception as e:  # the template's error: kvgate must fail too
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}, ensure_ascii=False))


if __name__ == "__main__":
    main()
