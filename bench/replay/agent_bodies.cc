#include "bench/replay/agent_bodies.h"

#include <iterator>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "xxhash.h"

namespace kvgate::replay {
namespace {

using common::AppendJsonString;
using common::StrAppend;
using common::StrCat;

constexpr std::string_view kEphemeral = R"(,"cache_control":{"type":"ephemeral"})";
constexpr std::string_view kAnthropicBeta =
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27";
constexpr std::string_view kCodexDeveloperText =
    "<permissions instructions>Filesystem sandboxing defines which files can be read or written. "
    "`sandbox_mode` is `workspace-write`: the sandbox permits reading files, and editing files in "
    "`cwd` and `writable_roots`. Network access is restricted. Approval policy is `on-request`."
    "</permissions instructions>";

// The shell commands the synthetic tool calls run: short, and fixed per call index so that
// every replay sends the same bytes.
constexpr std::string_view kCommands[] = {
    "git status --short",          "ls -la src",
    R"(rg -n "TODO" src)",         "sed -n '1,120p' src/main.cc",
    "make test 2>&1 | tail -n 40", "git diff --stat",
};

std::string_view Command(uint64_t k) { return kCommands[(k - 1) % std::size(kCommands)]; }

struct Tool {
  std::string_view name;
  std::string_view description;
  std::string_view schema;  // Compact JSON Schema of the arguments.
};

constexpr std::string_view kDraft7 = R"("$schema":"http://json-schema.org/draft-07/schema#")";

// Claude Code's core tools, abridged. Schemas are compact JSON; Claude Code adds $schema.
const std::vector<Tool>& ClaudeCodeTools() {
  static const std::vector<Tool> tools = {
      {"Bash", "Executes a given bash command in a persistent shell session with a timeout.",
       R"j({"type":"object","properties":{)j"
       R"j("command":{"type":"string","description":"The command to execute"},)j"
       R"j("timeout":{"type":"number","description":"Optional timeout in milliseconds"},)j"
       R"j("description":{"type":"string","description":"What it does in 5-10 words"},)j"
       R"j("run_in_background":{"type":"boolean"}},)j"
       R"j("required":["command"],"additionalProperties":false,)j"},
      {"Read", "Reads a file from the local filesystem.",
       R"j({"type":"object","properties":{)j"
       R"j("file_path":{"type":"string","description":"The absolute path to the file"},)j"
       R"j("offset":{"type":"number"},"limit":{"type":"number"}},)j"
       R"j("required":["file_path"],"additionalProperties":false,)j"},
      {"Edit", "Performs exact string replacements in files.",
       R"j({"type":"object","properties":{"file_path":{"type":"string"},)j"
       R"j("old_string":{"type":"string","description":"The text to replace"},)j"
       R"j("new_string":{"type":"string"},"replace_all":{"type":"boolean","default":false}},)j"
       R"j("required":["file_path","old_string","new_string"],"additionalProperties":false,)j"},
      {"Write", "Writes a file to the local filesystem, overwriting it if it exists.",
       R"j({"type":"object","properties":{"file_path":{"type":"string"},)j"
       R"j("content":{"type":"string"}},)j"
       R"j("required":["file_path","content"],"additionalProperties":false,)j"},
      {"Grep", "A powerful search tool built on ripgrep.",
       R"j({"type":"object","properties":{"pattern":{"type":"string"},)j"
       R"j("path":{"type":"string"},"glob":{"type":"string"},"output_mode":{"type":"string",)j"
       R"j("enum":["content","files_with_matches","count"]}},)j"
       R"j("required":["pattern"],"additionalProperties":false,)j"},
      {"Glob", "Fast file pattern matching tool that works with any codebase size.",
       R"j({"type":"object","properties":{"pattern":{"type":"string"},)j"
       R"j("path":{"type":"string"}},"required":["pattern"],"additionalProperties":false,)j"},
      {"TodoWrite", "Creates and manages a structured task list for the current session.",
       R"j({"type":"object","properties":{"todos":{"type":"array","items":{)j"
       R"j("type":"object","properties":{"content":{"type":"string"},"status":{)j"
       R"j("type":"string","enum":["pending","in_progress","completed"]},)j"
       R"j("activeForm":{"type":"string"}},"required":["content","status","activeForm"],)j"
       R"j("additionalProperties":false}}},)j"
       R"j("required":["todos"],"additionalProperties":false,)j"},
      {"Task", "Launches a new agent to handle complex, multi-step tasks autonomously.",
       R"j({"type":"object","properties":{"description":{"type":"string"},)j"
       R"j("prompt":{"type":"string"},"subagent_type":{"type":"string"}},)j"
       R"j("required":["description","prompt","subagent_type"],"additionalProperties":false,)j"},
  };
  return tools;
}

// Codex CLI's function tools, abridged.
const std::vector<Tool>& CodexTools() {
  static const std::vector<Tool> tools = {
      {"shell", "Runs a shell command and returns its output.",
       R"j({"type":"object","properties":{"command":{"type":"array",)j"
       R"j("items":{"type":"string"},"description":"The command to execute"},)j"
       R"j("workdir":{"type":"string"},"timeout_ms":{"type":"number"}},)j"
       R"j("required":["command"],"additionalProperties":false})j"},
      {"apply_patch", "Use the `apply_patch` tool to edit files.",
       R"j({"type":"object","properties":{"input":{"type":"string",)j"
       R"j("description":"The entire contents of the apply_patch command"}},)j"
       R"j("required":["input"],"additionalProperties":false})j"},
      {"update_plan", "Updates the task plan.",
       R"j({"type":"object","properties":{"explanation":{"type":"string"},)j"
       R"j("plan":{"type":"array","items":{"type":"object","properties":{)j"
       R"j("step":{"type":"string"},"status":{"type":"string"}},)j"
       R"j("required":["step","status"],"additionalProperties":false}}},)j"
       R"j("required":["plan"],"additionalProperties":false})j"},
      {"view_image", "Attach a local image (by filesystem path) to the conversation context.",
       R"j({"type":"object","properties":{"path":{"type":"string"}},)j"
       R"j("required":["path"],"additionalProperties":false})j"},
      {"list_dir", "Lists entries in a local directory.",
       R"j({"type":"object","properties":{"dir_path":{"type":"string"},)j"
       R"j("offset":{"type":"number"},"limit":{"type":"number"},"depth":{"type":"number"}},)j"
       R"j("required":["dir_path"],"additionalProperties":false})j"},
      {"grep_files", "Finds files whose contents match the pattern.",
       R"j({"type":"object","properties":{"pattern":{"type":"string"},)j"
       R"j("include":{"type":"string"},"path":{"type":"string"},"limit":{"type":"number"}},)j"
       R"j("required":["pattern"],"additionalProperties":false})j"},
  };
  return tools;
}

// The "tools" arrays, rendered once.
const std::string& MessagesTools() {
  static const std::string json = [] {
    std::string out = "[";
    for (const Tool& t : ClaudeCodeTools()) {
      if (out.size() > 1) out.push_back(',');
      out.append("{\"name\":");
      AppendJsonString(out, t.name);
      out.append(",\"description\":");
      AppendJsonString(out, t.description);
      StrAppend(&out, ",\"input_schema\":", t.schema, kDraft7, "}}");
    }
    out.push_back(']');
    return out;
  }();
  return json;
}

const std::string& ResponsesTools() {
  static const std::string json = [] {
    std::string out = "[";
    for (const Tool& t : CodexTools()) {
      if (out.size() > 1) out.push_back(',');
      out.append("{\"type\":\"function\",\"name\":");
      AppendJsonString(out, t.name);
      out.append(",\"description\":");
      AppendJsonString(out, t.description);
      StrAppend(&out, ",\"strict\":false,\"parameters\":", t.schema, "}");
    }
    out.push_back(']');
    return out;
  }();
  return json;
}

uint64_t Hash(std::string_view key, uint64_t seed) {
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

// A version-4-shaped UUID from two hashes of `key`.
std::string UuidLike(std::string_view key, uint64_t seed) {
  const uint64_t a = Hash(key, seed), b = Hash(key, seed + 1);
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                     0x8000 | ((b >> 48) & 0x3fff), b & 0xffffffffffffULL);
}

// Tool call ids allow [A-Za-z0-9_-] only (Anthropic checks); conversation ids hold '#', '/'.
std::string CallTag(std::string_view conversation) {
  std::string tag(conversation);
  for (char& c : tag) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return tag;
}

std::string_view SystemText(const std::vector<ChatMessage>& messages) {
  return !messages.empty() && messages[0].role == "system" ? std::string_view(messages[0].content)
                                                           : std::string_view();
}

// Claude Code sends its system prompt as two blocks after the billing one: a short identity
// line, then the rest. Here: the first prefix block (or the first half of a shorter prefix,
// on a token boundary), then the rest.
std::pair<std::string_view, std::string_view> SplitSystem(std::string_view text) {
  const size_t block = size_t{kAgenticBlockTokens} * kBytesPerToken;
  const size_t cut =
      text.size() >= 2 * block ? block : text.size() / 2 / kBytesPerToken * kBytesPerToken;
  return {text.substr(0, cut), text.substr(cut)};
}

}  // namespace

std::string_view ApiName(Api api) {
  switch (api) {
    case Api::kCompletions:
      return "completions";
    case Api::kChat:
      return "chat";
    case Api::kMessages:
      return "messages";
    case Api::kResponses:
      return "responses";
    case Api::kDefault:
      break;
  }
  return "default";
}

bool ParseApi(std::string_view name, Api* api) {
  for (Api a : {Api::kCompletions, Api::kChat, Api::kMessages, Api::kResponses}) {
    if (name == ApiName(a)) {
      *api = a;
      return true;
    }
  }
  return false;
}

AgentIdentity MakeAgentIdentity(std::string_view session, std::string_view conversation) {
  AgentIdentity id;
  id.session_id = UuidLike(session, 0xc1a0de);
  id.device_id = fmt::format("{:016x}{:016x}{:016x}{:016x}", Hash(session, 0xde0),
                             Hash(session, 0xde1), Hash(session, 0xde2), Hash(session, 0xde3));
  // The billing block differs per session (version and checksum): the gateway must not let it
  // split the shared system prefix.
  const uint64_t billing = Hash(session, 0xb111);
  id.billing =
      fmt::format("x-anthropic-billing-header: cc_version=2.1.{}; cc_entrypoint=cli; cch={:05x};",
                  billing % 50, (billing >> 8) & 0xfffff);
  id.thread_id = UuidLike(conversation, 0xc0de);
  id.call_tag = CallTag(conversation);
  return id;
}

std::string MessagesBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                         const AgentIdentity& identity, const BodyOptions& options) {
  size_t size = MessagesTools().size() + 1024;
  for (const auto& m : messages) size += m.content.size() + 192;
  std::string body;
  body.reserve(size);
  body.append("{\"model\":");
  AppendJsonString(body, options.model);
  body.append(",\"messages\":[");
  // Turn 1 is the user's text; from then on every answer ends in a tool call whose result
  // carries the next turn's new blocks.
  uint64_t k = 0;  // Answers so far: the call the next tool_result answers.
  bool any = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") continue;
    if (any) body.push_back(',');
    any = true;
    if (m.role == "assistant") ++k;
    const std::string id = StrCat("toolu_", identity.call_tag, "_", k);
    if (m.role == "assistant") {
      body.append("{\"role\":\"assistant\",\"content\":[");
      // An empty text block is invalid (Anthropic rejects it): a failed turn's answer is empty.
      if (!m.content.empty()) {
        body.append("{\"type\":\"text\",\"text\":");
        AppendJsonString(body, m.content);
        body.append("},");
      }
      body.append("{\"type\":\"tool_use\",\"id\":");
      AppendJsonString(body, id);
      body.append(",\"name\":\"Bash\",\"input\":{\"command\":");
      AppendJsonString(body, Command(k));
      body.push_back('}');
    } else if (k == 0) {
      body.append("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":");
      AppendJsonString(body, m.content);
    } else {
      body.append("{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":");
      AppendJsonString(body, id);
      body.append(",\"content\":");
      AppendJsonString(body, m.content);
    }
    // Claude Code marks the newest block only, so the marker moves every turn.
    if (i + 1 == messages.size()) body.append(kEphemeral);
    body.append("}]}");
  }
  body.append("],\"system\":[{\"type\":\"text\",\"text\":");
  AppendJsonString(body, identity.billing);
  body.push_back('}');
  const auto [intro, rest] = SplitSystem(SystemText(messages));
  if (!intro.empty()) {
    body.append(",{\"type\":\"text\",\"text\":");
    AppendJsonString(body, intro);
    body.push_back('}');
  }
  if (!rest.empty()) {
    body.append(",{\"type\":\"text\",\"text\":");
    AppendJsonString(body, rest);
    StrAppend(&body, kEphemeral, "}");
  }
  StrAppend(&body, "],\"tools\":", MessagesTools());
  std::string user_id = "{\"device_id\":";
  AppendJsonString(user_id, identity.device_id);
  user_id.append(",\"account_uuid\":\"\",\"session_id\":");
  AppendJsonString(user_id, identity.session_id);
  user_id.push_back('}');
  body.append(",\"metadata\":{\"user_id\":");
  AppendJsonString(body, user_id);
  StrAppend(&body, "},\"max_tokens\":", MaxTokens(output_tokens, options));
  if (options.thinking) body.append(R"(,"thinking":{"type":"enabled","budget_tokens":1024})");
  body.append(R"(,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]})"
              R"(,"stream":true})");
  return body;
}

std::string ResponsesBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                          const AgentIdentity& identity, const BodyOptions& options,
                          std::string_view previous_response_id) {
  size_t size = ResponsesTools().size() + 1024;
  for (const auto& m : messages) size += m.content.size() + 256;
  std::string body;
  body.reserve(size);
  body.append("{\"model\":");
  AppendJsonString(body, options.model);
  body.append(",\"instructions\":");
  AppendJsonString(body, SystemText(messages));
  const bool chained = !previous_response_id.empty();
  if (chained) {
    body.append(",\"previous_response_id\":");
    AppendJsonString(body, previous_response_id);
  }
  body.append(",\"input\":[");
  // Chained, the server holds everything up to the last answer: send what follows it.
  size_t last_answer = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "assistant") last_answer = i;
  }
  const size_t from = chained ? last_answer : 0;
  bool any = false;
  auto next_item = [&] {
    if (any) body.push_back(',');
    any = true;
  };
  uint64_t k = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") continue;
    if (m.role == "assistant") ++k;
    if (i < from) continue;
    const std::string call_id = StrCat("call_", identity.call_tag, "_", k);
    if (m.role == "assistant") {
      if (!chained && !m.content.empty()) {
        next_item();
        body.append(
            R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":)");
        AppendJsonString(body, m.content);
        body.append("}]}");
      }
      next_item();
      body.append(R"({"type":"function_call","call_id":)");
      AppendJsonString(body, call_id);
      std::string command = R"({"command":["bash","-lc",)";
      AppendJsonString(command, Command(k));
      command.append("]}");
      body.append(R"(,"name":"shell","arguments":)");
      AppendJsonString(body, command);
      body.push_back('}');
    } else if (k == 0) {
      next_item();
      body.append(
          R"({"type":"message","role":"developer","content":[{"type":"input_text","text":)");
      AppendJsonString(body, kCodexDeveloperText);
      body.append("}]}");
      next_item();
      body.append(R"({"type":"message","role":"user","content":[{"type":"input_text","text":)");
      AppendJsonString(body, m.content);
      body.append("}]}");
    } else {
      next_item();
      body.append(R"({"type":"function_call_output","call_id":)");
      AppendJsonString(body, call_id);
      body.append(",\"output\":");
      AppendJsonString(body, m.content);
      body.push_back('}');
    }
  }
  const bool store = options.responses_store || chained;
  StrAppend(&body, "],\"tools\":", ResponsesTools(), ",\"store\":", store ? "true" : "false",
            ",\"stream\":true");
  // Codex asks for encrypted reasoning only when nothing is stored server-side.
  body.append(store ? R"(,"include":[])" : R"(,"include":["reasoning.encrypted_content"])");
  body.append(",\"prompt_cache_key\":");
  AppendJsonString(body, identity.thread_id);
  StrAppend(&body, ",\"max_output_tokens\":", MaxTokens(output_tokens, options),
            R"(,"client_metadata":{"originator":"codex_cli_rs"}})");
  return body;
}

AgentClient::AgentClient(Api api, AgentIdentity identity, const BodyOptions& options)
    : api_(api), identity_(std::move(identity)), options_(options) {}

ApiRequest AgentClient::NextTurn(const std::vector<ChatMessage>& messages, uint64_t output_tokens) {
  // AgentConversation adds an answer and a user message per turn, or restarts at two messages.
  const bool extends = previous_size_ > 0 && messages.size() == previous_size_ + 2;
  previous_size_ = messages.size();
  ApiRequest r;
  switch (api_) {
    case Api::kMessages:
      r.path = "/v1/messages";
      r.headers = {{"anthropic-version", "2023-06-01"},
                   {"anthropic-beta", std::string(kAnthropicBeta)},
                   {"x-app", "cli"},
                   {"X-Claude-Code-Session-Id", identity_.session_id}};
      r.body = MessagesBody(messages, output_tokens, identity_, options_);
      break;
    case Api::kResponses: {
      r.path = "/v1/responses";
      r.headers = {{"originator", "codex_cli_rs"}, {"session_id", identity_.thread_id}};
      // Without the previous response's id (it failed, or the history restarted) the turn
      // starts a new chain with the whole input.
      const bool chain = options_.responses_store && extends;
      r.body = ResponsesBody(messages, output_tokens, identity_, options_,
                             chain ? std::string_view(previous_response_id_) : "");
      break;
    }
    default:
      r.path = "/v1/chat/completions";
      r.body = ChatBody(messages, output_tokens, options_);
      break;
  }
  previous_response_id_.clear();
  return r;
}

ApiRequest SingleTurnRequest(Api api, std::string prompt, uint64_t output_tokens,
                             const BodyOptions& options, std::string_view id) {
  switch (api) {
    case Api::kMessages:
    case Api::kResponses: {
      AgentClient client(api, MakeAgentIdentity(id, id), options);
      return client.NextTurn({{"system", ""}, {"user", std::move(prompt)}}, output_tokens);
    }
    case Api::kChat:
      return {"/v1/chat/completions",
              {},
              ChatBody({{"user", std::move(prompt)}}, output_tokens, options)};
    default:
      return {"/v1/completions", {}, CompletionsBody(prompt, output_tokens, options)};
  }
}

}  // namespace kvgate::replay
