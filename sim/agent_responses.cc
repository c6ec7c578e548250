#include "sim/agent_responses.h"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "sim/agent_json.h"
#include "sim/tokens.h"

namespace kvgate::sim::agent {
namespace {

using kvindex::ApiKind;
namespace dom = simdjson::dom;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A forced tool call's arguments, as Python's json.dumps({"text": text}) writes them.
std::string ToolArguments(std::string_view text) {
  return common::StrCat("{\"text\": ", Json(text), "}");
}

std::string_view ItemPrefix(std::string_view type) {
  if (type == "message") return "msg";
  if (type == "function_call") return "fc";
  if (type == "function_call_output") return "fco";
  if (type == "reasoning") return "rs";
  return "item";
}

// A Responses input item as the input_items listing shows it: with an "id" (`*id`), a "type",
// and a message's string content as one input_text (output_text for the assistant) part.
std::string InputItem(dom::element item, std::string_view request_id, size_t i, std::string* id) {
  dom::object o;
  if (item.get(o)) return Raw(item);
  std::string_view type = "message", role;
  bool has_type = false;
  id->clear();
  for (auto field : o) {
    std::string_view s;
    if (field.key == "type" && !field.value.get(s)) {
      type = s;
      has_type = true;
    } else if (field.key == "role" && !field.value.get(s)) {
      role = s;
    } else if (field.key == "id" && !field.value.get(s)) {
      id->assign(s);  // "" when empty: one is made up
    }
  }
  std::string out = "{";
  if (id->empty()) {
    *id = common::StrCat(ItemPrefix(type), "_", request_id, "_", i);
    common::StrAppend(&out, "\"id\":", Json(*id), ",");
  }
  if (!has_type) out += "\"type\":\"message\",";
  bool first = true;
  for (auto field : o) {
    std::string_view given;
    if (field.key == "id" && (field.value.get(given) || given.empty())) continue;
    if (!first) out += ',';
    first = false;
    common::StrAppend(&out, Json(field.key), ":");
    std::string_view text;
    if (type == "message" && field.key == "content" && !field.value.get(text)) {
      common::StrAppend(&out, "[{\"type\":\"", role == "assistant" ? "output_text" : "input_text",
                        "\",\"text\":", Json(text), "}]");
    } else {
      out += Raw(field.value);
    }
  }
  if (out.back() == ',') out.pop_back();
  return out + "}";
}

// vLLM's 404 for an unknown response id (its param is "response_id" wherever the id came from).
HttpAnswer NotFound(std::string_view id) {
  return {404, common::StrCat(R"({"error":{"message":)",
                              Json(common::StrCat("Response with id '", id, "' not found.")),
                              R"(,"type":"invalid_request_error","param":"response_id",)",
                              R"("code":404}})")};
}

// The OpenAI API's listing: `order` desc (default) or asc, `after` an item id, `limit` 1-100
// (default 20).
std::string InputItems(const StoredResponse& r, std::string_view query) {
  bool asc = false;
  std::string_view after;
  uint64_t limit = 20;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = pair.substr(0, eq), value = pair.substr(eq + 1);
    if (key == "order") asc = value == "asc";
    if (key == "after") after = value;
    if (key == "limit" && common::ParseUint64(value, &limit))
      limit = std::clamp<uint64_t>(limit, 1, 100);
  }
  std::vector<size_t> order(r.input_items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = asc ? i : order.size() - 1 - i;
  size_t begin = 0;
  if (!after.empty()) {
    while (begin < order.size() && r.input_item_ids[order[begin]] != after) ++begin;
    begin = std::min(begin + 1, order.size());  // an unknown cursor lists nothing
  }
  const size_t end = std::min<size_t>(order.size(), begin + limit);
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += ',';
    out += r.input_items[order[i]];
  }
  common::StrAppend(&out,
                    "],\"first_id\":", begin < end ? Json(r.input_item_ids[order[begin]]) : "null",
                    ",\"last_id\":", begin < end ? Json(r.input_item_ids[order[end - 1]]) : "null",
                    ",\"has_more\":", end < order.size(), "}");
  return out;
}

// A response object, whole or as Responses events (vLLM's openai/responses/serving.py,
// non-Harmony path), stored once finished when the request asked for it.
class ResponsesWriter : public AnswerWriter {
 public:
  ResponsesWriter(const SimOptions& o, AgentCall call, ResponseStore* store, uint32_t max_tokens)
      : call_(std::move(call)),
        store_(store),
        model_(Json(o.model)),
        max_tokens_(max_tokens),
        created_(UnixNow()),
        item_id_(
            common::StrCat(call_.tool_name.empty() ? "msg_" : "fc_", call_.response_id.substr(5))),
        call_id_(common::StrCat("call_", call_.response_id.substr(5))) {}

  std::string Whole(absl::Span<const uint32_t> tokens, const UsageCounts& usage,
                    std::string_view) override {
    const std::string text = TextOf(tokens, 0, tokens.size());
    std::string response = Finished(text, usage);
    Keep(response, text);
    return response;
  }

  void Begin(std::string* out) override {
    const std::string initial = Object("in_progress", "[]", "null");
    Event("response.created", common::StrCat(",\"response\":", initial), out);
    Event("response.in_progress", common::StrCat(",\"response\":", initial), out);
    if (!call_.tool_name.empty()) {
      Event("response.output_item.added",
            common::StrCat(R"(,"output_index":0,"item":{"id":")", item_id_,
                           R"(","type":"function_call","call_id":")", call_id_, R"(","name":)",
                           Json(call_.tool_name), R"(,"arguments":"","status":"in_progress"})"),
            out);
      return;
    }
    Event("response.output_item.added",
          common::StrCat(R"(,"output_index":0,"item":{"id":")", item_id_,
                         R"(","type":"message","role":"assistant","content":[],)",
                         R"("status":"in_progress"})"),
          out);
    Event("response.content_part.added",
          common::StrCat(R"(,"item_id":")", item_id_,
                         R"(","output_index":0,"content_index":0,"part":{"type":"output_text",)",
                         R"("text":"","annotations":[],"logprobs":[]})"),
          out);
  }

  void Token(uint32_t token, bool, std::string* out) override {
    const std::string text = TokenText(token);
    if (!call_.tool_name.empty()) {
      ArgumentsDelta(common::StrCat(text_.empty() ? "{\"text\": \"" : "", JsonBody(text)), out);
    } else {
      Event("response.output_text.delta",
            common::StrCat(R"(,"item_id":")", item_id_,
                           R"(","output_index":0,"content_index":0,"delta":)", Json(text),
                           R"(,"logprobs":[])"),
            out);
    }
    text_ += text;
  }

  void End(const UsageCounts& usage, std::string* out) override {
    if (!call_.tool_name.empty()) {
      ArgumentsDelta("\"}", out);
      Event("response.function_call_arguments.done",
            common::StrCat(R"(,"item_id":")", item_id_, R"(","output_index":0,"name":)",
                           Json(call_.tool_name), R"(,"arguments":)", Json(ToolArguments(text_))),
            out);
    } else {
      const std::string at =
          common::StrCat(R"(,"item_id":")", item_id_, R"(","output_index":0,"content_index":0)");
      Event("response.output_text.done",
            common::StrCat(at, R"(,"text":)", Json(text_), R"(,"logprobs":[])"), out);
      Event("response.content_part.done",
            common::StrCat(at, R"(,"part":{"type":"output_text","text":)", Json(text_),
                           R"(,"annotations":[]})"),
            out);
    }
    Event("response.output_item.done", common::StrCat(R"(,"output_index":0,"item":)", Item(text_)),
          out);
    std::string response = Finished(text_, usage);
    Event("response.completed", common::StrCat(",\"response\":", response), out);
    Keep(std::move(response), text_);
  }

 private:
  // An event: its type, sequence number, then `fields` (",\"key\":value...").
  void Event(std::string_view type, std::string_view fields, std::string* out) {
    Sse(type,
        common::StrCat("{\"type\":\"", type, "\",\"sequence_number\":", sequence_++, fields, "}"),
        out);
  }

  void ArgumentsDelta(std::string_view delta, std::string* out) {
    Event(
        "response.function_call_arguments.delta",
        common::StrCat(R"(,"item_id":")", item_id_, R"(","output_index":0,"delta":)", Json(delta)),
        out);
  }

  // The output item, completed.
  std::string Item(const std::string& text) const {
    if (!call_.tool_name.empty()) {
      return common::StrCat(R"({"id":")", item_id_, R"(","type":"function_call","call_id":")",
                            call_id_, R"(","name":)", Json(call_.tool_name), R"(,"arguments":)",
                            Json(ToolArguments(text)), R"(,"status":"completed"})");
    }
    return common::StrCat(
        R"({"id":")", item_id_, R"(","type":"message","role":"assistant","status":"completed",)",
        R"("content":[)",
        text.empty() ? ""
                     : common::StrCat(R"({"type":"output_text","text":)", Json(text),
                                      R"(,"annotations":[],"logprobs":null})"),
        "]}");
  }

  std::string Finished(const std::string& text, const UsageCounts& u) const {
    // vLLM: finish_reason "length" (the simulator's only one) makes the response incomplete.
    const bool incomplete = u.completion >= max_tokens_;
    const std::string usage = common::StrCat(
        "{\"input_tokens\":", u.prompt, ",\"input_tokens_details\":{\"cached_tokens\":", u.cached,
        u.store ? common::StrCat(",\"kv_store_tokens\":", *u.store) : "",
        "},\"output_tokens\":", u.completion,
        ",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":",
        u.prompt + u.completion, EngineTtftField(u), "}");
    return Object(incomplete ? "incomplete" : "completed", "[" + Item(text) + "]", usage);
  }

  // The response object: every key of vLLM's ResponsesResponse, in its order, plus `store`.
  std::string Object(std::string_view status, std::string_view output,
                     std::string_view usage) const {
    const ResponsesEcho& e = call_.echo;
    return common::StrCat(
        "{\"id\":", Json(call_.response_id), ",\"created_at\":", created_,
        ",\"incomplete_details\":",
        status == "incomplete" ? R"({"reason":"max_output_tokens"})" : "null",
        ",\"instructions\":", e.instructions, ",\"metadata\":", e.metadata, ",\"model\":", model_,
        ",\"object\":\"response\",\"output\":", output,
        ",\"parallel_tool_calls\":", e.parallel_tool_calls, ",\"temperature\":", e.temperature,
        ",\"tool_choice\":", e.tool_choice, ",\"tools\":", e.tools, ",\"top_p\":", e.top_p,
        ",\"background\":false,\"max_output_tokens\":", max_tokens_,
        ",\"max_tool_calls\":", e.max_tool_calls, ",\"previous_response_id\":",
        call_.previous_response_id.empty() ? "null" : Json(call_.previous_response_id),
        ",\"prompt\":null,\"reasoning\":", e.reasoning, ",\"service_tier\":", e.service_tier,
        ",\"status\":\"", status, "\",\"text\":", e.text, ",\"top_logprobs\":", e.top_logprobs,
        ",\"truncation\":", e.truncation, ",\"usage\":", usage, ",\"user\":", e.user,
        ",\"store\":", call_.store, "}");
  }

  void Keep(std::string response, const std::string& text) {
    if (!call_.store) return;
    auto turn = std::make_shared<StoredTurn>();
    turn->previous = std::move(call_.previous);
    turn->input = std::move(call_.input);
    if (call_.tool_name.empty()) turn->outputs.push_back(text);  // function calls are not re-added
    StoredResponse r;
    r.response = std::move(response);
    r.turn = std::move(turn);
    r.input_items = std::move(call_.input_items);
    r.input_item_ids = std::move(call_.input_item_ids);
    store_->Put(call_.response_id, std::move(r));
    call_.store = false;  // once
  }

  AgentCall call_;
  ResponseStore* store_;
  const std::string model_;
  const uint32_t max_tokens_;
  const int64_t created_;
  const std::string item_id_;
  const std::string call_id_;
  uint64_t sequence_ = 0;
  std::string text_;
};

}  // namespace

AgentCall ReadResponses(std::string_view body, std::string_view request_id, const SimOptions& o,
                        kvindex::AgentChatConverter& converter, simdjson::dom::parser& json,
                        ResponseStore& store) {
  constexpr ErrorStyle kStyle = ErrorStyle::kOpenAi;
  AgentCall c;
  c.api = ApiKind::kResponses;
  c.response_id = common::StrCat("resp_", request_id);
  kvindex::ConvertedChat chat;
  dom::object obj;
  if (absl::Status s = converter.Convert(body, ApiKind::kResponses, &chat); !s.ok()) {
    c.error = Bad(kStyle, common::Sv(s.message()));
    return c;
  }
  if (json.parse(body.data(), body.size()).get(obj)) {
    c.error = Bad(kStyle, "request body is not a JSON object");
    return c;
  }
  if (!chat.unsupported.empty()) {
    c.error = Bad(kStyle, chat.unsupported);
    return c;
  }
  dom::element e;
  bool b = false;
  if (!obj["prompt"].get(e) && !e.is_null()) {
    c.error = Bad(kStyle, "prompt template is not supported");
    return c;
  }
  if (!obj["background"].get(b) && b) {
    c.error = Bad(kStyle, "kvgate-sim does not support background responses");
    return c;
  }
  if (!obj["stream"].get(b)) c.stream = b;
  if (!obj["store"].get(b)) c.store = b;
  if (o.responses_store_entries == 0) c.store = false;  // vLLM with its store off
  if (!obj["max_output_tokens"].get(e) && !e.is_null()) {
    uint64_t v = 0;
    if (e.get(v) || v == 0) {
      c.error = Bad(kStyle, "max_output_tokens: must be an integer greater than 0");
      return c;
    }
    c.max_tokens = static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
  }
  ResponsesEcho& echo = c.echo;
  for (auto [key, target] : std::initializer_list<std::pair<const char*, std::string*>>{
           {"instructions", &echo.instructions},
           {"metadata", &echo.metadata},
           {"parallel_tool_calls", &echo.parallel_tool_calls},
           {"temperature", &echo.temperature},
           {"tool_choice", &echo.tool_choice},
           {"tools", &echo.tools},
           {"top_p", &echo.top_p},
           {"max_tool_calls", &echo.max_tool_calls},
           {"reasoning", &echo.reasoning},
           {"service_tier", &echo.service_tier},
           {"text", &echo.text},
           {"top_logprobs", &echo.top_logprobs},
           {"truncation", &echo.truncation},
           {"user", &echo.user}}) {
    if (!obj[key].get(e) && !e.is_null()) *target = Raw(e);
  }
  // A function call forced by tool_choice: "required" (the first function tool) or
  // {"type":"function","name":N}.
  std::string_view s;
  dom::object choice;
  if (!chat.tools.empty()) {
    if (!obj["tool_choice"].get(s) && s == "required") {
      dom::array tools;
      if (!obj["tools"].get(tools)) {
        for (dom::element tool : tools) {
          std::string_view type, name;
          if (!tool["type"].get(type) && type == "function" && !tool["name"].get(name)) {
            c.tool_name.assign(name);
            break;
          }
        }
      }
    } else if (!obj["tool_choice"].get(choice) && !choice["type"].get(s) && s == "function" &&
               !choice["name"].get(s)) {
      c.tool_name.assign(s);
    }
  }
  // The prompt (vLLM's construct_input_messages): the instructions, the previous response's
  // messages without their system messages, its output messages, then the new input.
  std::vector<std::string> prompt;
  if (o.convert_quirk == ConvertQuirk::kResponses) prompt.emplace_back(kQuirkMessage);
  size_t first_input = 0;
  if (!obj["instructions"].get(s) && !s.empty() && !chat.roles.empty() &&
      chat.roles[0] == "system") {
    prompt.push_back(std::move(chat.messages[0]));
    first_input = 1;
  }
  if (!obj["previous_response_id"].get(s) && !s.empty()) {
    c.previous_response_id.assign(s);
    const StoredResponse* previous = store.Find(s);
    if (previous == nullptr) {
      c.error = NotFound(s);
      return c;
    }
    c.previous = previous->turn;
    std::vector<const StoredTurn*> turns;  // oldest first
    for (const StoredTurn* t = c.previous.get(); t != nullptr; t = t->previous.get()) {
      turns.push_back(t);
    }
    for (auto t = turns.rbegin(); t != turns.rend(); ++t) {
      prompt.insert(prompt.end(), (*t)->input.begin(), (*t)->input.end());
      for (const std::string& text : (*t)->outputs) {
        prompt.push_back(common::StrCat(R"({"role":"assistant","content":)", Json(text), "}"));
      }
    }
  }
  for (size_t i = first_input; i < chat.messages.size(); ++i) {
    if (c.store && chat.roles[i] != "system") c.input.push_back(chat.messages[i]);
    prompt.push_back(std::move(chat.messages[i]));
  }
  c.chat_body = kvindex::ChatBodyOf(chat.model, prompt, chat.tools);
  // The input items, for GET /v1/responses/{id}/input_items.
  if (c.store && !obj["input"].get(e)) {
    dom::array items;
    std::string id;
    if (!e.get(s)) {
      c.input_item_ids.push_back(common::StrCat("msg_", request_id, "_0"));
      c.input_items.push_back(common::StrCat(R"({"id":)", Json(c.input_item_ids[0]),
                                             R"(,"type":"message","role":"user","content":)",
                                             R"([{"type":"input_text","text":)", Json(s), "}]}"));
    } else if (!e.get(items)) {
      for (dom::element item : items) {
        c.input_items.push_back(InputItem(item, request_id, c.input_items.size(), &id));
        c.input_item_ids.push_back(id);
      }
    }
  }
  return c;
}

std::unique_ptr<AnswerWriter> NewResponsesWriter(const SimOptions& o, AgentCall call,
                                                 ResponseStore* store, uint32_t max_tokens) {
  return std::make_unique<ResponsesWriter>(o, std::move(call), store, max_tokens);
}

std::optional<HttpAnswer> StoredEndpoint(ResponseStore& store, std::string_view method,
                                         std::string_view path, std::string_view query) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  if (!path.starts_with(kPrefix)) return std::nullopt;
  std::string_view id = path.substr(kPrefix.size());
  std::string_view action;
  if (const size_t slash = id.find('/'); slash != std::string_view::npos) {
    action = id.substr(slash + 1);
    id = id.substr(0, slash);
  }
  const bool get = method == "GET";
  if (id.empty() ||
      !((action.empty() && (get || method == "DELETE")) ||
        (action == "cancel" && method == "POST") || (action == "input_items" && get))) {
    return std::nullopt;
  }
  const StoredResponse* r = store.Find(id);
  if (r == nullptr) return NotFound(id);
  if (action == "cancel") {
    // vLLM cancels background responses only; the simulator has none.
    return HttpAnswer{400, R"({"error":{"message":"Cannot cancel a synchronous response.",)"
                           R"("type":"invalid_request_error","param":null,"code":400}})"};
  }
  if (action == "input_items") return HttpAnswer{200, InputItems(*r, query)};
  if (get) return HttpAnswer{200, r->response};
  std::string body =
      common::StrCat(R"({"id":)", Json(id), R"(,"object":"response","deleted":true})");
  store.Erase(id);
  return HttpAnswer{200, std::move(body)};
}

}  // namespace kvgate::sim::agent
