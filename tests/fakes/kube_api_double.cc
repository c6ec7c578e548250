#include "tests/fakes/kube_api_double.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <stdexcept>

#include "tests/support/loopback.h"

namespace kvgate::testing {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string MapJson(const std::map<std::string, std::string>& m) {
  std::string out = "{";
  for (const auto& [k, v] : m) {
    if (out.size() > 1) out += ",";
    out += Quote(k) + ":" + Quote(v);
  }
  return out + "}";
}

std::string UrlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

std::string StatusJson(int code, const std::string& reason, const std::string& message) {
  return R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":)" +
         Quote(message) + R"(,"reason":")" + reason + R"(","code":)" + std::to_string(code) + "}";
}

std::string Chunk(const std::string& data) {
  std::ostringstream o;
  o << std::hex << data.size() << "\r\n" << data << "\r\n";
  return o.str();
}

}  // namespace

// One client connection, plain or TLS.
class KubeApiDouble::Conn {
 public:
  Conn(int fd, SSL_CTX* ctx) : fd_(fd) {
    if (ctx != nullptr) {
      ssl_ = SSL_new(ctx);
      SSL_set_fd(ssl_, fd);
      if (SSL_accept(ssl_) != 1) ok_ = false;
    }
  }
  ~Conn() {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  bool ok() const { return ok_; }
  int fd() const { return fd_; }

  // The request head, up to its empty line; empty on EOF or error.
  std::string ReadHead() {
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      const int n = ssl_ != nullptr ? SSL_read(ssl_, buf, sizeof(buf))
                                    : static_cast<int>(::read(fd_, buf, sizeof(buf)));
      if (n <= 0) return "";
      in.append(buf, n);
      if (in.size() > 65536) return "";
    }
    return in;
  }
  bool Write(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const int n =
          ssl_ != nullptr
              ? SSL_write(ssl_, s.data() + off, static_cast<int>(s.size() - off))
              : static_cast<int>(::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL));
      if (n <= 0) return false;
      off += n;
    }
    return true;
  }
  void Respond(int status, const std::string& reason, const std::string& body) {
    Write("HTTP/1.1 " + std::to_string(status) + " " + reason +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n" + body);
  }

 private:
  int fd_;
  SSL* ssl_ = nullptr;
  bool ok_ = true;
};

KubeApiDouble::KubeApiDouble(Options options) : options_(std::move(options)) {
  if (!options_.cert_file.empty()) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(ctx, options_.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, options_.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      throw std::runtime_error("KubeApiDouble: cannot load the certificate");
    }
    ssl_ctx_ = ctx;
  }
  listen_fd_ = ListenLoopback(&port_, 64);
  if (listen_fd_ < 0) throw std::runtime_error("KubeApiDouble: cannot listen");
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

KubeApiDouble::~KubeApiDouble() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  {
    common::MutexLock lock(&mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.SignalAll();
  acceptor_.join();
  for (auto& t : threads_) t.join();
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

std::string KubeApiDouble::url() const {
  return std::string(ssl_ctx_ != nullptr ? "https" : "http") +
         "://127.0.0.1:" + std::to_string(port_);
}

void KubeApiDouble::AcceptLoop() {
  while (!stop_) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (stop_) return;
      continue;
    }
    common::MutexLock lock(&mu_);
    fds_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void KubeApiDouble::Serve(int fd) {
  {
    Conn c(fd, static_cast<SSL_CTX*>(ssl_ctx_));
    if (!c.ok()) ++handshake_failures_;
    const std::string head = c.ok() ? c.ReadHead() : "";
    if (!head.empty()) {
      const size_t sp1 = head.find(' ');
      const size_t sp2 = head.find(' ', sp1 + 1);
      const std::string target = head.substr(sp1 + 1, sp2 - sp1 - 1);
      const std::string path = target.substr(0, target.find('?'));
      std::map<std::string, std::string> query;
      if (const size_t q = target.find('?'); q != std::string::npos) {
        std::istringstream in(target.substr(q + 1));
        std::string kv;
        while (std::getline(in, kv, '&')) {
          const size_t eq = kv.find('=');
          query[kv.substr(0, eq)] = eq == std::string::npos ? "" : UrlDecode(kv.substr(eq + 1));
        }
      }
      std::string auth;
      std::istringstream lines(head);
      for (std::string line; std::getline(lines, line);) {
        if (line.size() > 14 && strncasecmp(line.c_str(), "authorization:", 14) == 0) {
          auth = line.substr(14);
          while (!auth.empty() && (auth.front() == ' ')) auth.erase(0, 1);
          while (!auth.empty() && (auth.back() == '\r' || auth.back() == ' ')) auth.pop_back();
        }
      }
      const std::string ns_prefix = "/namespaces/" + options_.namespace_ + "/";
      if (!options_.token.empty() && auth != "Bearer " + options_.token) {
        ++unauthorized_;
        c.Respond(401, "Unauthorized", StatusJson(401, "Unauthorized", "Unauthorized"));
      } else if (path == "/apis/discovery.k8s.io/v1" + ns_prefix.substr(0, ns_prefix.size() - 1) +
                             "/endpointslices") {
        HandleSlices(c, query);
      } else if (path.starts_with("/api/v1" + ns_prefix + "pods/")) {
        ++pod_reads_;
        const std::string name = path.substr(("/api/v1" + ns_prefix + "pods/").size());
        mu_.Lock();
        const auto it = pods_.find(name);
        if (pod_status_ != 0) {
          mu_.Unlock();
          c.Respond(pod_status_, "Forbidden",
                    StatusJson(pod_status_, "Forbidden",
                               "pods \"" + name + "\" is forbidden: User cannot get resource"));
        } else if (it == pods_.end()) {
          mu_.Unlock();
          c.Respond(404, "Not Found",
                    StatusJson(404, "NotFound", "pods \"" + name + "\" not found"));
        } else {
          const std::string body =
              R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":)" + Quote(name) +
              R"(,"namespace":)" + Quote(options_.namespace_) + R"(,"uid":)" +
              Quote("uid-" + name) + R"(,"labels":)" + MapJson(it->second.second) +
              R"(,"annotations":)" + MapJson(it->second.first) +
              R"(},"spec":{"containers":[{"name":"engine","image":"vllm/vllm-openai"}]},)"
              R"("status":{"phase":"Running"}})";
          mu_.Unlock();
          c.Respond(200, "OK", body);
        }
      } else {
        c.Respond(404, "Not Found",
                  StatusJson(404, "NotFound", "the server could not find " + path));
      }
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  common::MutexLock lock(&mu_);
  std::erase(fds_, fd);
  ::close(fd);
}

bool KubeApiDouble::Matches(const std::string& selector,
                            const std::map<std::string, std::string>& labels) {
  std::istringstream in(selector);
  std::string term;
  while (std::getline(in, term, ',')) {
    const size_t eq = term.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = term.substr(0, eq);
    const std::string value = term.substr(term[eq + 1] == '=' ? eq + 2 : eq + 1);
    const auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

std::string KubeApiDouble::SliceJson(const FakeSlice& s, uint64_t rv) const {
  std::map<std::string, std::string> labels = s.labels;
  labels["kubernetes.io/service-name"] = s.service;
  labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io";
  std::string out =
      R"({"metadata":{"name":)" + Quote(s.name) + R"(,"generateName":)" + Quote(s.service + "-") +
      R"(,"namespace":)" + Quote(options_.namespace_) + R"(,"uid":)" + Quote("uid-" + s.name) +
      R"(,"resourceVersion":")" + std::to_string(rv) +
      R"(","generation":1,"creationTimestamp":"2026-12-01T00:00:00Z","labels":)" + MapJson(labels) +
      R"(,"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2026-12-01T00:00:00Z"},)"
      R"("ownerReferences":[{"apiVersion":"v1","kind":"Service","name":)" +
      Quote(s.service) +
      R"(,"uid":"uid-svc","controller":true,"blockOwnerDeletion":true}]},"addressType":)" +
      Quote(s.address_type) + R"(,"endpoints":[)";
  for (size_t i = 0; i < s.endpoints.size(); ++i) {
    const FakeEndpoint& e = s.endpoints[i];
    if (i > 0) out += ",";
    out += R"({"addresses":[)" + Quote(e.address) + R"(],"conditions":{)";
    std::string cond;
    auto add = [&](const char* k, const std::optional<bool>& v) {
      if (!v) return;
      if (!cond.empty()) cond += ",";
      cond += std::string("\"") + k + "\":" + (*v ? "true" : "false");
    };
    add("ready", e.ready);
    add("serving", e.serving);
    add("terminating", e.terminating);
    out += cond + "}";
    if (!e.pod.empty()) {
      out += R"(,"targetRef":{"kind":"Pod","namespace":)" + Quote(options_.namespace_) +
             R"(,"name":)" + Quote(e.pod) + R"(,"uid":)" + Quote("uid-" + e.pod) + "}";
    }
    out += R"(,"nodeName":"node-1","zone":"zone-a"})";
  }
  out += R"(],"ports":[)";
  for (size_t i = 0; i < s.ports.size(); ++i) {
    if (i > 0) out += ",";
    out += R"({"name":)" + Quote(s.ports[i].first) + R"(,"protocol":"TCP","port":)" +
           std::to_string(s.ports[i].second) + R"(,"appProtocol":"http"})";
  }
  return out + "]}";
}

void KubeApiDouble::HandleSlices(Conn& c, const std::map<std::string, std::string>& query) {
  const auto sel = query.find("labelSelector");
  const std::string selector = sel == query.end() ? "" : sel->second;
  const bool watch =
      query.contains("watch") && query.at("watch") != "false" && query.at("watch") != "0";
  mu_.Lock();
  if (!watch) {
    ++lists_;
    std::string items;
    for (const auto& [name, s] : slices_) {
      std::map<std::string, std::string> labels = s.labels;
      labels["kubernetes.io/service-name"] = s.service;
      if (!Matches(selector, labels)) continue;
      if (!items.empty()) items += ",";
      items += SliceJson(s, slice_rv_[name]);
    }
    const std::string body =
        R"({"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":")" +
        std::to_string(rv_) + R"("},"items":[)" + items + "]}";
    mu_.Unlock();
    c.Respond(200, "OK", body);
    return;
  }
  const std::string from_text =
      query.contains("resourceVersion") ? query.at("resourceVersion") : "";
  last_watch_version_ = from_text;
  uint64_t from = from_text.empty() ? rv_ : std::stoull(from_text);
  if (from < compacted_) {
    ++gone_;
    const std::string status = StatusJson(
        410, "Expired",
        "too old resource version: " + from_text + " (" + std::to_string(compacted_) + ")");
    const bool as_http = gone_as_http_;
    mu_.Unlock();
    if (as_http) {
      c.Respond(410, "Gone", status);
    } else {
      c.Write(
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: "
          "chunked\r\n\r\n" +
          Chunk(R"({"type":"ERROR","object":)" + status + "}\n") + "0\r\n\r\n");
    }
    return;
  }
  ++watches_;
  ++open_watches_;
  const bool bookmarks =
      query.contains("allowWatchBookmarks") && query.at("allowWatchBookmarks") == "true";
  const uint64_t timeout_s =
      query.contains("timeoutSeconds") ? std::stoull(query.at("timeoutSeconds")) : 1800;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  const uint64_t drop_gen = drop_generation_;
  mu_.Unlock();
  bool alive = c.Write(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  mu_.Lock();
  while (alive) {
    std::string out;
    for (const auto& e : history_) {
      if (e.rv <= from) continue;
      from = e.rv;
      if (e.type == "BOOKMARK") {
        if (bookmarks) out += Chunk(R"({"type":"BOOKMARK","object":)" + e.object + "}\n");
        continue;
      }
      std::map<std::string, std::string> labels = e.labels;
      labels["kubernetes.io/service-name"] = e.service;
      if (!Matches(selector, labels)) continue;
      out += Chunk(R"({"type":")" + e.type + R"(","object":)" + e.object + "}\n");
    }
    if (!out.empty()) {
      mu_.Unlock();
      alive = c.Write(out);
      mu_.Lock();
      continue;
    }
    if (stop_ || drop_generation_ != drop_gen) {
      ::shutdown(c.fd(), SHUT_RDWR);  // no last chunk: the client sees a cut stream
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      mu_.Unlock();
      c.Write("0\r\n\r\n");
      mu_.Lock();
      break;
    }
    cv_.WaitUntil(&mu_, deadline);
  }
  --open_watches_;
  mu_.Unlock();
}

void KubeApiDouble::Apply(const FakeSlice& slice) {
  common::MutexLock lock(&mu_);
  const bool existed = slices_.contains(slice.name);
  slices_[slice.name] = slice;
  slice_rv_[slice.name] = ++rv_;
  history_.push_back(
      {rv_, existed ? "MODIFIED" : "ADDED", slice.service, slice.labels, SliceJson(slice, rv_)});
  cv_.SignalAll();
}

void KubeApiDouble::Delete(const std::string& name) {
  common::MutexLock lock(&mu_);
  const auto it = slices_.find(name);
  if (it == slices_.end()) return;
  ++rv_;
  history_.push_back(
      {rv_, "DELETED", it->second.service, it->second.labels, SliceJson(it->second, rv_)});
  slices_.erase(it);
  cv_.SignalAll();
}

void KubeApiDouble::Bookmark() {
  common::MutexLock lock(&mu_);
  ++rv_;
  history_.push_back(
      {rv_,
       "BOOKMARK",
       "",
       {},
       R"({"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":")" +
           std::to_string(rv_) + R"("}})"});
  cv_.SignalAll();
}

void KubeApiDouble::Compact() {
  common::MutexLock lock(&mu_);
  compacted_ = ++rv_;  // versions are cluster-wide: something else changed meanwhile
  const uint64_t compacted = compacted_;  // a copy: the analysis cannot see into the lambda
  std::erase_if(history_, [compacted](const Event& e) { return e.rv <= compacted; });
}

void KubeApiDouble::DropWatches() {
  common::MutexLock lock(&mu_);
  ++drop_generation_;
  cv_.SignalAll();
}

void KubeApiDouble::SetPod(const std::string& name, std::map<std::string, std::string> annotations,
                           std::map<std::string, std::string> labels) {
  common::MutexLock lock(&mu_);
  pods_[name] = {std::move(annotations), std::move(labels)};
}

std::string KubeApiDouble::last_watch_version() const {
  common::MutexLock lock(&mu_);
  return last_watch_version_;
}

uint64_t KubeApiDouble::version() const {
  common::MutexLock lock(&mu_);
  return rv_;
}

}  // namespace kvgate::testing
