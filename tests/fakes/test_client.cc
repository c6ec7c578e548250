#include "tests/fakes/test_client.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <regex>

#include "common/strings.h"

namespace kvgate::testing {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

// Each header replaces a default of its name; a name listed twice is sent twice (tests of
// duplicate headers).
void SetHeaders(const Headers& headers, http::request<http::string_body>& req) {
  std::vector<std::string> seen;
  for (const auto& [k, v] : headers) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
      req.insert(k, v);
    } else {
      req.set(k, v);
      seen.push_back(k);
    }
  }
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string HttpResponse::Header(const std::string& name) const {
  auto it = headers.find(Lower(name));
  return it == headers.end() ? "" : it->second;
}

HttpResponse AdminFetch(uint16_t port, const std::string& method, const std::string& target,
                        const std::string& body, Headers headers) {
  headers.emplace_back("authorization", std::string("Bearer ") + kAdminToken);
  return Fetch(port, method, target, body, headers);
}

std::string HeldReservations(uint16_t port) {
  const HttpResponse r = AdminFetch(port, "GET", "/admin/workers");
  if (r.status != 200) return "GET /admin/workers: " + std::to_string(r.status) + " " + r.error;
  static const std::regex kLoad(R"re("url":"([^"]*)".*?"load":\{([^}]*)\})re");
  static const std::regex kNumber(R"re("(\w+)":(-?[0-9]+))re");
  std::string out;
  for (std::sregex_iterator w(r.body.begin(), r.body.end(), kLoad), end; w != end; ++w) {
    const std::string fields = (*w)[2];
    for (std::sregex_iterator f(fields.begin(), fields.end(), kNumber); f != end; ++f) {
      if ((*f)[2] != "0") out += (*w)[1].str() + " " + (*f)[1].str() + "=" + (*f)[2].str() + "; ";
    }
  }
  return out;
}

std::map<std::string, std::string> AdminIndexBlocks(uint16_t port) {
  const std::string body = AdminFetch(port, "GET", "/admin/workers?blocks=1").body;
  std::map<std::string, std::string> out;
  // Plain finds: the lists can be long, and std::regex recurses per character.
  size_t at = 0;
  while ((at = body.find("{\"url\":\"", at)) != std::string::npos) {
    at += 8;
    const std::string url = body.substr(at, body.find('"', at) - at);
    const size_t list = body.find("\"gpu_block_hashes\":[", at);
    const size_t next = body.find("{\"url\":\"", at);
    if (list == std::string::npos || (next != std::string::npos && list > next)) {
      out[url] = "";
      continue;
    }
    const size_t begin = list + 20;
    out[url] = body.substr(begin, body.find(']', begin) - begin);
  }
  return out;
}

std::pair<int64_t, int64_t> AdminInFlight(uint16_t port, const std::string& worker) {
  const std::string body = AdminFetch(port, "GET", "/admin/workers").body;
  const size_t at = body.find("{\"url\":\"" + worker + "\"");
  if (at == std::string::npos) return {-1, -1};
  const size_t load = body.find("\"load\":{\"in_flight\":", at);
  const size_t local = body.find("\"local_load\":{\"in_flight\":", at);
  if (load == std::string::npos || local == std::string::npos) return {-1, -1};
  return {std::stoll(body.substr(load + 20)), std::stoll(body.substr(local + 26))};
}

HttpResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                   const std::string& body, const Headers& headers,
                   std::chrono::milliseconds timeout) {
  HttpResponse out;
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(timeout);
  beast::error_code ec;
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  if (ec) {
    out.error = ec.message();
    return out;
  }
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  SetHeaders(headers, req);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  http::write(stream, req, ec);
  if (ec) {
    out.error = ec.message();
    return out;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  http::read(stream, buffer, parser, ec);
  if (ec) {
    out.error = ec.message();
    return out;
  }
  auto& res = parser.get();
  out.status = res.result_int();
  for (const auto& f : res)
    out.headers[Lower(std::string(f.name_string()))] = std::string(f.value());
  out.body = std::move(res.body());
  return out;
}

struct StreamingRequest::Impl {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  bool failed = false;
  char buf[65536];
};

StreamingRequest::StreamingRequest(uint16_t port, const std::string& target,
                                   const std::string& body, const Headers& headers)
    : impl_(std::make_unique<Impl>()) {
  impl_->parser.body_limit(boost::none);
  beast::error_code ec;
  impl_->stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  if (ec) {
    impl_->failed = true;
    return;
  }
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  SetHeaders(headers, req);
  req.body() = body;
  req.prepare_payload();
  http::write(impl_->stream, req, ec);
  if (ec) impl_->failed = true;
}

StreamingRequest::~StreamingRequest() = default;

bool StreamingRequest::ReadHeader(std::chrono::milliseconds timeout) {
  if (impl_->failed) return false;
  impl_->stream.expires_after(timeout);
  beast::error_code ec;
  http::read_header(impl_->stream, impl_->buffer, impl_->parser, ec);
  if (ec) impl_->failed = true;
  return !ec;
}

int StreamingRequest::status() const { return impl_->parser.get().result_int(); }

std::string StreamingRequest::Header(const std::string& name) const {
  auto it = impl_->parser.get().find(name);
  return it == impl_->parser.get().end() ? "" : std::string(it->value());
}

std::string StreamingRequest::ReadSome(std::chrono::milliseconds timeout) {
  while (!impl_->failed && !impl_->parser.is_done()) {
    impl_->parser.get().body().data = impl_->buf;
    impl_->parser.get().body().size = sizeof(impl_->buf);
    impl_->stream.expires_after(timeout);
    beast::error_code ec;
    http::read_some(impl_->stream, impl_->buffer, impl_->parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      impl_->failed = true;
      break;
    }
    const size_t n = sizeof(impl_->buf) - impl_->parser.get().body().size;
    if (n > 0) return std::string(impl_->buf, n);
  }
  return "";
}

std::string StreamingRequest::ReadAll(std::chrono::milliseconds timeout) {
  std::string all;
  for (;;) {
    std::string piece = ReadSome(timeout);
    if (piece.empty()) break;
    all += piece;
  }
  return all;
}

bool StreamingRequest::done() const { return impl_->parser.is_done(); }

void StreamingRequest::Close() {
  beast::error_code ignored;
  impl_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  impl_->stream.socket().close(ignored);
}

std::string ChatBody(bool stream, size_t bytes, const std::string& model) {
  std::string content = "Write a haiku about caches.";
  std::string body =
      common::StrCat(R"({"model":")", model, R"(","messages":[{"role":"user","content":")");
  const std::string tail = common::StrCat(R"("}],"stream":)", stream ? "true" : "false", "}");
  if (bytes > body.size() + content.size() + tail.size()) {
    content.append(bytes - body.size() - content.size() - tail.size(), 'a');
  }
  return body + content + tail;
}

}  // namespace kvgate::testing
