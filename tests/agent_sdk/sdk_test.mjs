// The agents' official SDKs, @anthropic-ai/sdk and openai, against kvgate in front of two
// kvgate-sim workers (started by sdk_test.py, which passes the gateway's base URL). What a real
// client parses is the contract here: each SDK must accept kvgate's answers (bodies, SSE events,
// error shapes and statuses) as it accepts the providers' own. Plain node:assert; exits non-zero
// on the first failure.
//
// Usage: node sdk_test.mjs BASE_URL   (env: KVGATE_NPM_DIR, KVGATE_WORKERS, KVGATE_ADMIN_TOKEN)
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { join } from "node:path";

// ESM `import` ignores NODE_PATH: scripts/setup installs the SDKs under $KVGATE_NPM_DIR.
const npmDir = process.env.KVGATE_NPM_DIR || "/var/cache/kvgate/npm";
const require = createRequire(join(npmDir, "node_modules") + "/");
function load(pkg) {
  try {
    return require(pkg);
  } catch (e) {
    console.error(`FAIL: npm package ${pkg} not under ${npmDir} (scripts/setup installs it): ` +
                  e.message);
    process.exit(1);
  }
}
const { Anthropic } = load("@anthropic-ai/sdk");
const { OpenAI } = load("openai");

const base = process.argv[2];
assert.ok(base, "usage: node sdk_test.mjs BASE_URL");
const workers = (process.env.KVGATE_WORKERS || "").split(",").filter(Boolean);
const adminToken = process.env.KVGATE_ADMIN_TOKEN || "sdk-test-admin";
const model = "sim-model";
// No retries: a failure must show as it is, not as a later attempt's answer.
const anthropic = new Anthropic({ apiKey: "x", baseURL: base, maxRetries: 0, timeout: 30000 });
const openai = new OpenAI({ apiKey: "x", baseURL: base + "/v1", maxRetries: 0, timeout: 30000 });

// The worker that answered, from kvgate's x-kvgate-worker header.
function workerOf(response) {
  const w = response.headers.get("x-kvgate-worker");
  assert.ok(w, "no x-kvgate-worker header");
  if (workers.length) assert.ok(workers.includes(w), `x-kvgate-worker ${w} is not in ${workers}`);
  return w;
}

async function rejects(promise, cls, check) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e?.constructor?.name}: ${e}`);
    check(e);
    return;
  }
  assert.fail(`expected ${cls.name}, the request succeeded`);
}

async function drain(worker, draining) {
  const r = await fetch(`${base}/admin/drain`, {
    method: "POST",
    headers: { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/json" },
    body: JSON.stringify({ worker, draining }),
  });
  assert.equal(r.status, 200, `POST /admin/drain ${worker} ${draining}: ${await r.text()}`);
}

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

// ------------------------------------------------------------------------- @anthropic-ai/sdk

test("messages.create: a text message, its usage and the answering worker", async () => {
  const { data: msg, response } = await anthropic.messages
    .create({ model, max_tokens: 16, messages: [{ role: "user", content: "Hello, Claude" }] })
    .withResponse();
  assert.equal(response.status, 200);
  workerOf(response);
  assert.equal(msg.type, "message");
  assert.equal(msg.role, "assistant");
  assert.equal(msg.content[0].type, "text");
  assert.ok(msg.content[0].text.length > 0);
  assert.equal(msg.stop_reason, "max_tokens");
  for (const k of ["input_tokens", "output_tokens", "cache_read_input_tokens",
                   "cache_creation_input_tokens"]) {
    assert.equal(typeof msg.usage[k], "number", `usage.${k}: ${JSON.stringify(msg.usage)}`);
  }
  assert.equal(msg.usage.output_tokens, 16);
  assert.ok(msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 0);
});

test("messages.stream: text events, then a final message with usage", async () => {
  const stream = anthropic.messages.stream({
    model, max_tokens: 12, messages: [{ role: "user", content: "Stream a short answer" }],
  });
  let text = "";
  const events = [];
  stream.on("text", (delta) => { text += delta; });
  for await (const ev of stream) events.push(ev.type);
  const final = await stream.finalMessage();
  assert.equal(events[0], "message_start");
  assert.ok(events.includes("content_block_delta"), events.join(","));
  assert.equal(events.at(-1), "message_stop");
  assert.ok(text.length > 0, "no text event");
  assert.equal(final.content[0].type, "text");
  assert.equal(final.content[0].text, text);
  assert.equal(final.usage.output_tokens, 12);
  assert.equal(typeof final.usage.input_tokens, "number");
});

test("tool_use -> tool_result round trip, one session on one worker", async () => {
  const session = { headers: { "X-Claude-Code-Session-Id": "sdk-test-session-1" } };
  const tools = [{
    name: "get_weather",
    description: "The weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  }];
  // kvaware keeps a session where its own history is cached, once that history is at least
  // routing.kvaware.min_match_tokens (256) long (docs/routing.md, "Session affinity"); the
  // session header alone only seeds ties. A real first turn is that long: so is this one.
  const context = Array.from({ length: 300 }, (_, i) => `note${i}`).join(" ");
  const question = { role: "user", content: `${context}\nWhat is the weather in Paris?` };
  const first = await anthropic.messages
    .create({ model, max_tokens: 16, tools, tool_choice: { type: "any" }, messages: [question] },
            session)
    .withResponse();
  const call = first.data.content.find((b) => b.type === "tool_use");
  assert.ok(call, JSON.stringify(first.data.content));
  assert.equal(call.name, "get_weather");
  assert.equal(typeof call.input, "object");
  assert.ok(call.id);
  assert.equal(first.data.stop_reason, "tool_use");
  const second = await anthropic.messages
    .create({
      model, max_tokens: 16, tools,
      messages: [
        question,
        { role: "assistant", content: first.data.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: call.id,
                                    content: "Sunny, 21 C" }] },
      ],
    }, session)
    .withResponse();
  assert.equal(second.data.content[0].type, "text");
  assert.equal(workerOf(second.response), workerOf(first.response),
               "the session's second turn went to another worker");
});

test("system blocks with Claude Code's billing header block", async () => {
  const instructions = { type: "text", text: "You are a careful coding agent. ".repeat(8),
                         cache_control: { type: "ephemeral" } };
  const billing = { type: "text",
                    text: "x-anthropic-billing-header: cc_version=2.1.3.abc; cc_entrypoint=cli;" };
  const messages = [{ role: "user", content: "List the files" }];
  const msg = await anthropic.messages.create({ model, max_tokens: 8,
                                                system: [billing, instructions], messages });
  assert.equal(msg.content[0].type, "text");
  // The worker drops the billing block, as vLLM does: the prompt is the one without it.
  const withIt = await anthropic.messages.countTokens({ model, system: [billing, instructions],
                                                        messages });
  const without = await anthropic.messages.countTokens({ model, system: [instructions], messages });
  assert.equal(withIt.input_tokens, without.input_tokens);
});

test("thinking: a thinking block comes first", async () => {
  const msg = await anthropic.messages.create({
    model, max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 1024 },
    messages: [{ role: "user", content: "Think, then answer" }],
  });
  assert.equal(msg.content[0].type, "thinking");
  assert.ok(msg.content[0].thinking.length > 0);
  assert.equal(typeof msg.content[0].signature, "string");
  assert.equal(msg.content[1].type, "text");
});

test("messages.countTokens: positive and stable", async () => {
  const body = { model, system: "Be brief.", messages: [{ role: "user", content: "Count me" }] };
  const a = await anthropic.messages.countTokens(body);
  const b = await anthropic.messages.countTokens(body);
  assert.ok(a.input_tokens > 0, JSON.stringify(a));
  assert.equal(a.input_tokens, b.input_tokens);
});

test("a bad body: BadRequestError 400 in Anthropic's error shape", async () => {
  await rejects(anthropic.messages.create({ model, max_tokens: 8, messages: "x" }),
                Anthropic.BadRequestError, (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error?.type, "error", JSON.stringify(e.error));
    assert.equal(e.error?.error?.type, "invalid_request_error", JSON.stringify(e.error));
    assert.equal(typeof e.error?.error?.message, "string");
  });
});

// ----------------------------------------------------------------------------------- openai

test("responses.create, not streamed", async () => {
  const { data: r, response } = await openai.responses
    .create({ model, input: "Hello, Codex", max_output_tokens: 16 })
    .withResponse();
  workerOf(response);
  assert.equal(r.object, "response");
  assert.match(r.id, /^resp_/);
  assert.ok(["completed", "incomplete"].includes(r.status), r.status);
  assert.equal(r.output[0].type, "message");
  assert.ok(r.output_text.length > 0, "no output_text");
  assert.equal(r.usage.output_tokens, 16);
  assert.equal(typeof r.usage.input_tokens, "number");
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, "number");
});

test("responses.create, streamed: response.created ... response.completed", async () => {
  const stream = await openai.responses.create({ model, input: "Stream it", max_output_tokens: 8,
                                                 stream: true });
  const types = [];
  let text = "";
  let completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed") completed = ev.response;
  }
  assert.equal(types[0], "response.created");
  assert.ok(types.includes("response.output_text.delta"), types.join(","));
  assert.equal(types.at(-1), "response.completed");
  assert.ok(completed, "no response.completed");
  assert.equal(completed.output[0].content[0].text, text);
  assert.equal(completed.usage.output_tokens, 8);
});

test("a previous_response_id chain of three turns stays on its worker", async () => {
  let previous;
  let owner;
  let inputTokens = 0;
  for (let turn = 0; turn < 3; ++turn) {
    const { data: r, response } = await openai.responses
      .create({ model, input: `Turn ${turn}: go on`, max_output_tokens: 8,
                ...(previous ? { previous_response_id: previous } : {}) })
      .withResponse();
    const worker = workerOf(response);
    if (turn === 0) owner = worker;
    assert.equal(worker, owner, `turn ${turn} left the worker that stored its previous response`);
    assert.equal(r.previous_response_id ?? undefined, previous);
    // Each turn's prompt carries the conversation so far.
    assert.ok(r.usage.input_tokens > inputTokens, `turn ${turn}: ${JSON.stringify(r.usage)}`);
    inputTokens = r.usage.input_tokens;
    previous = r.id;
  }
});

test("retrieve, inputItems.list and delete on the owner; then 404", async () => {
  const { data: made, response } = await openai.responses
    .create({ model, input: "Keep me", max_output_tokens: 8 })
    .withResponse();
  const owner = workerOf(response);
  const got = await openai.responses.retrieve(made.id).withResponse();
  assert.equal(workerOf(got.response), owner);
  assert.equal(got.data.id, made.id);
  assert.equal(got.data.output_text, made.output_text);
  const listed = await openai.responses.inputItems.list(made.id).withResponse();
  assert.equal(workerOf(listed.response), owner);
  const items = [];
  for await (const item of listed.data) items.push(item);
  assert.equal(items.length, 1, JSON.stringify(items));
  assert.equal(items[0].type, "message");
  assert.equal(items[0].role, "user");
  assert.deepEqual(items[0].content, [{ type: "input_text", text: "Keep me" }]);
  const deleted = await openai.responses.delete(made.id).withResponse();
  assert.equal(workerOf(deleted.response), owner);
  await rejects(openai.responses.retrieve(made.id), OpenAI.NotFoundError, (e) => {
    assert.equal(e.status, 404);
    assert.ok(e.message.includes(made.id), e.message);
  });
});

test("a continuation whose owner is draining: NotFoundError naming the id", async () => {
  const { data: made, response } = await openai.responses
    .create({ model, input: "Before the drain", max_output_tokens: 8 })
    .withResponse();
  const owner = workerOf(response);
  await drain(owner, true);
  try {
    await rejects(openai.responses.create({ model, input: "After the drain", max_output_tokens: 8,
                                            previous_response_id: made.id }),
                  OpenAI.NotFoundError, (e) => {
      assert.equal(e.status, 404);
      assert.ok(e.message.includes(made.id), e.message);
      assert.equal(e.error?.type, "invalid_request_error", JSON.stringify(e.error));
    });
  } finally {
    await drain(owner, false);
  }
});

let failed = 0;
for (const [name, fn] of tests) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}\n${e?.stack ?? e}`);
  }
}
console.log(failed ? `${failed} of ${tests.length} failed` : `all ${tests.length} passed`);
process.exit(failed ? 1 : 0);
