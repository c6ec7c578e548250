#include "bench/replay/trace.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::replay {
namespace {

namespace od = simdjson::ondemand;
using common::StrCat;

absl::Status Invalid(std::string_view name, std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(name, ": ", where, ": ", what));
}

std::string_view ErrorText(simdjson::error_code ec) { return simdjson::error_message(ec); }

// Reads a JSON number (integer or floating) as double.
bool GetNumber(od::value v, double* out) {
  od::number_type type;
  if (v.get_number_type().get(type)) return false;
  if (type == od::number_type::floating_point_number) return !v.get_double().get(*out);
  if (type == od::number_type::signed_integer) {
    int64_t i;
    if (v.get_int64().get(i)) return false;
    *out = static_cast<double>(i);
    return true;
  }
  uint64_t u;
  if (v.get_uint64().get(u)) return false;
  *out = static_cast<double>(u);
  return true;
}

bool GetCount(od::value v, uint64_t* out) {
  double d;
  if (!GetNumber(v, &d) || d < 0) return false;
  *out = static_cast<uint64_t>(d);
  return true;
}

bool GetIds(od::value v, std::vector<uint64_t>* out) {
  od::array arr;
  if (v.get_array().get(arr)) return false;
  for (auto element : arr) {
    uint64_t id;
    if (element.get_uint64().get(id)) return false;
    out->push_back(id);
  }
  return true;
}

// Parses an agentic session object (root or sub-agent); `path` names it in errors.
absl::Status ParseSessionObject(od::object obj, std::string_view name, const std::string& path,
                                AgentSession* session, int depth);

absl::Status ParseRequests(od::value v, std::string_view name, const std::string& path,
                           AgentSession* session, int depth) {
  od::array arr;
  if (v.get_array().get(arr)) return Invalid(name, path, "not an array");
  size_t index = 0;
  for (auto element : arr) {
    const std::string where = StrCat(path, "[", index++, "]");
    od::object obj;
    if (element.get_object().get(obj)) return Invalid(name, where, "not an object");
    // Fields come in any order; collect them, then decide what the entry is.
    AgentRequest request;
    AgentSession sub;
    bool is_subagent = false;
    bool has_ids = false;
    bool has_in = false;
    std::string agent_id;
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return Invalid(name, where, "bad key");
      od::value value;
      if (field.value().get(value)) return Invalid(name, where, "bad value");
      const std::string fwhere = StrCat(where, ".", key);
      if (key == "type") {
        std::string_view type;
        if (value.get_string().get(type)) return Invalid(name, fwhere, "not a string");
        is_subagent = type == "subagent";
      } else if (key == "t") {
        if (!GetNumber(value, &request.t)) return Invalid(name, fwhere, "not a number");
      } else if (key == "in") {
        if (!GetCount(value, &request.in)) return Invalid(name, fwhere, "not a count");
        has_in = true;
      } else if (key == "out") {
        if (!GetCount(value, &request.out)) return Invalid(name, fwhere, "not a count");
      } else if (key == "think_time") {
        if (!GetNumber(value, &request.think_time)) return Invalid(name, fwhere, "not a number");
      } else if (key == "api_time") {
        if (!GetNumber(value, &request.api_time)) return Invalid(name, fwhere, "not a number");
      } else if (key == "hash_ids") {
        if (!GetIds(value, &request.hash_ids)) {
          return Invalid(name, fwhere, "not an array of unsigned integers");
        }
        has_ids = true;
      } else if (key == "agent_id") {
        std::string_view id;
        if (value.get_string().get(id)) return Invalid(name, fwhere, "not a string");
        agent_id = std::string(id);
      } else if (key == "tool_tokens") {
        if (!GetCount(value, &sub.tool_tokens)) return Invalid(name, fwhere, "not a count");
      } else if (key == "system_tokens") {
        if (!GetCount(value, &sub.system_tokens)) return Invalid(name, fwhere, "not a count");
      } else if (key == "requests") {
        if (depth > 8) return Invalid(name, fwhere, "sub-agents nested too deeply");
        auto status = ParseRequests(value, name, fwhere, &sub, depth + 1);
        if (!status.ok()) return status;
        is_subagent = true;
      }
    }
    if (is_subagent) {
      sub.t = request.t;
      if (agent_id.empty()) agent_id = StrCat("agent_", session->subagents.size());
      sub.id = StrCat(session->id, "/", agent_id);
      // Sub-agents without their own prefix sizes inherit the parent's.
      if (sub.tool_tokens == 0 && sub.system_tokens == 0) {
        sub.tool_tokens = session->tool_tokens;
        sub.system_tokens = session->system_tokens;
      }
      session->subagents.push_back(std::move(sub));
    } else {
      if (!has_ids) return Invalid(name, where, "missing hash_ids");
      if (!has_in) return Invalid(name, where, "missing in");
      session->requests.push_back(std::move(request));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t AgentSession::TotalRequests() const {
  uint64_t n = requests.size();
  for (const auto& sub : subagents) n += sub.TotalRequests();
  return n;
}

absl::StatusOr<std::vector<MooncakeRequest>> ParseMooncakeJsonl(std::string_view content,
                                                                std::string_view name) {
  std::vector<MooncakeRequest> out;
  std::vector<std::string> errors;
  od::parser parser;
  int line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto fail = [&](std::string_view what) {
      errors.push_back(StrCat(name, ":", line_no, ": ", what));
    };
    simdjson::padded_string padded(line);
    od::document doc;
    if (auto ec = parser.iterate(padded).get(doc)) {
      fail(ErrorText(ec));
      continue;
    }
    od::object obj;
    if (auto ec = doc.get_object().get(obj)) {
      fail(StrCat("not a JSON object: ", ErrorText(ec)));
      continue;
    }
    MooncakeRequest request;
    request.line = line_no;
    bool has_ts = false, has_in = false, has_out = false, has_ids = false;
    std::string error;
    for (auto field : obj) {
      std::string_view key;
      od::value value;
      if (field.unescaped_key().get(key) || field.value().get(value)) {
        error = "malformed JSON";
        break;
      }
      if (key == "timestamp") {
        has_ts = GetNumber(value, &request.timestamp_ms);
        if (!has_ts) error = "timestamp is not a number";
      } else if (key == "input_length") {
        has_in = GetCount(value, &request.input_length);
        if (!has_in) error = "input_length is not a count";
      } else if (key == "output_length") {
        has_out = GetCount(value, &request.output_length);
        if (!has_out) error = "output_length is not a count";
      } else if (key == "hash_ids") {
        has_ids = GetIds(value, &request.hash_ids);
        if (!has_ids) error = "hash_ids is not an array of unsigned integers";
      }  // Unknown fields are skipped by the iterator.
      if (!error.empty()) break;
    }
    if (error.empty()) {
      if (!has_ts)
        error = "missing timestamp";
      else if (!has_in)
        error = "missing input_length";
      else if (!has_out)
        error = "missing output_length";
      else if (!has_ids)
        error = "missing hash_ids";
    }
    if (!error.empty()) {
      fail(error);
      continue;
    }
    out.push_back(std::move(request));
  }
  if (!errors.empty()) {
    const size_t total = errors.size();
    if (errors.size() > 10) errors.resize(10);
    std::string message = StrCat(total, " malformed line(s): ", common::StrJoin(errors, "; "));
    return absl::InvalidArgumentError(message);
  }
  return out;
}

namespace {

absl::Status ParseSessionObject(od::object obj, std::string_view name, const std::string& path,
                                AgentSession* session, int depth) {
  bool has_requests = false;
  for (auto field : obj) {
    std::string_view key;
    od::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) {
      return Invalid(name, path, "malformed JSON");
    }
    const std::string where = path.empty() ? std::string(key) : StrCat(path, ".", key);
    if (key == "id") {
      std::string_view id;
      if (value.get_string().get(id)) return Invalid(name, where, "not a string");
      session->id = std::string(id);
    } else if (key == "tool_tokens") {
      if (!GetCount(value, &session->tool_tokens)) return Invalid(name, where, "not a count");
    } else if (key == "system_tokens") {
      if (!GetCount(value, &session->system_tokens)) return Invalid(name, where, "not a count");
    } else if (key == "block_size") {
      uint64_t block_size;
      if (!GetCount(value, &block_size) || block_size != kAgenticBlockTokens) {
        return Invalid(name, where, "only 64-token blocks are supported");
      }
    } else if (key == "requests") {
      // The id and prefix sizes precede "requests" in the published traces; sub-agent ids are
      // fixed up below in case they did not.
      auto status = ParseRequests(value, name, where, session, depth);
      if (!status.ok()) return status;
      has_requests = true;
    }
  }
  if (!has_requests) return Invalid(name, path.empty() ? "<root>" : path, "missing requests");
  return absl::OkStatus();
}

void FixSubagentIds(AgentSession* session) {
  for (auto& sub : session->subagents) {
    const size_t slash = sub.id.rfind('/');
    sub.id =
        StrCat(session->id, "/", slash == std::string::npos ? sub.id : sub.id.substr(slash + 1));
    FixSubagentIds(&sub);
  }
}

}  // namespace

absl::StatusOr<AgentSession> ParseAgentSession(std::string_view content, std::string_view name) {
  simdjson::padded_string padded(content);
  od::parser parser;
  od::document doc;
  if (auto ec = parser.iterate(padded).get(doc)) return Invalid(name, "<root>", ErrorText(ec));
  od::object obj;
  if (auto ec = doc.get_object().get(obj)) return Invalid(name, "<root>", ErrorText(ec));
  AgentSession session;
  auto status = ParseSessionObject(obj, name, "", &session, 0);
  if (!status.ok()) return status;
  if (session.id.empty()) {
    session.id = std::filesystem::path(std::string(name)).stem().string();
  }
  FixSubagentIds(&session);
  return session;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::vector<MooncakeRequest>> LoadMooncakeFile(const std::string& path) {
  auto content = ReadFileToString(path);
  if (!content.ok()) return content.status();
  return ParseMooncakeJsonl(*content, path);
}

absl::StatusOr<std::vector<AgentSession>> LoadAgentSessions(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (entry.is_regular_file() && entry.path().extension() == ".json") {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) return absl::NotFoundError(StrCat("no *.json traces in ", path));
  } else {
    files.push_back(path);
  }
  std::vector<AgentSession> sessions;
  for (const auto& file : files) {
    auto content = ReadFileToString(file);
    if (!content.ok()) return content.status();
    auto session = ParseAgentSession(*content, file);
    if (!session.ok()) return session.status();
    sessions.push_back(std::move(*session));
  }
  return sessions;
}

bool IsMooncakePath(const std::string& path) {
  return std::filesystem::path(path).extension() == ".jsonl";
}

}  // namespace kvgate::replay
