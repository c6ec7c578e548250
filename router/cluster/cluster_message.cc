// File: router/cluster/cluster_message.cc
// Frames and records of the replica sync: writing and checked reading (cluster_message.h).
#include "router/cluster/cluster_message.h"

#include <cstring>

#include "common/strings.h"

namespace kvgate::router::cluster {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  static_assert(std::is_integral_v<T>);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out->append(b, sizeof(T));
}

void PutString(std::string* out, std::string_view s) {
  const auto n = static_cast<uint16_t>(std::min(s.size(), kMaxNameBytes));
  Put<uint16_t>(out, n);
  out->append(s.data(), n);
}

// Writes a record's kind and a length to fill in once the body is written.
size_t BeginRecord(std::string* out, RecordKind kind) {
  Put<uint8_t>(out, static_cast<uint8_t>(kind));
  Put<uint32_t>(out, 0);
  return out->size();
}

void EndRecord(std::string* out, size_t body_start) {
  const auto n = static_cast<uint32_t>(out->size() - body_start);
  std::memcpy(out->data() + body_start - sizeof(uint32_t), &n, sizeof(n));
}

// Reads from a byte range; any read past its end or over a limit makes it fail for good.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  template <typename T>
  T Get() {
    T v{};
    if (!Need(sizeof(T))) return v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string String(const char* what) {
    const uint16_t n = Get<uint16_t>();
    if (n > kMaxNameBytes) Fail(common::StrCat(what, " longer than ", kMaxNameBytes, " bytes"));
    if (!Need(n)) return {};
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::string_view Take(size_t n) {
    if (!Need(n)) return {};
    std::string_view s(p_, n);
    p_ += n;
    return s;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  void Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    p_ = end_;
  }

 private:
  bool Need(size_t n) {
    if (ok() && left() >= n) return true;
    Fail("truncated");
    return false;
  }
  const char* p_;
  const char* end_;
  std::string error_;
};

int64_t GetLoadValue(Reader& r) {
  const auto v = r.Get<int64_t>();
  if (v < 0 || v > kMaxLoadValue) r.Fail(common::StrCat("load value out of range: ", v));
  return v;
}

void ReadBody(Reader& r, const DecodeLimits& limits, Record* rec) {
  switch (rec->kind) {
    case RecordKind::kHello:
    case RecordKind::kUnpin:
    case RecordKind::kSnapshotRequest:
      rec->text = r.String("text");
      break;
    case RecordKind::kLoads: {
      rec->flag = r.Get<uint8_t>() != 0;
      rec->changed_unix_us = r.Get<int64_t>();
      const uint16_t n = r.Get<uint16_t>();
      for (uint16_t i = 0; i < n && r.ok(); ++i) {
        WorkerLoad w;
        w.worker = r.String("worker");
        w.load.in_flight = GetLoadValue(r);
        w.load.pending_prefill_tokens = GetLoadValue(r);
        w.load.active_decode = GetLoadValue(r);
        w.load.active_kv_blocks = GetLoadValue(r);
        rec->loads.push_back(std::move(w));
      }
      break;
    }
    case RecordKind::kLearn:
    case RecordKind::kForget: {
      rec->worker = r.String("worker");
      rec->prompt_tokens = r.Get<uint32_t>();
      const uint32_t n = r.Get<uint32_t>();
      if (n > limits.max_blocks) {
        r.Fail(common::StrCat(n, " blocks in a record, more than ", limits.max_blocks));
        break;
      }
      const std::string_view raw = r.Take(size_t{n} * sizeof(kvindex::BlockHash));
      if (!r.ok()) break;
      rec->blocks.resize(n);
      if (n > 0) std::memcpy(rec->blocks.data(), raw.data(), raw.size());
      break;
    }
    case RecordKind::kPin:
      rec->text = r.String("response id");
      rec->worker = r.String("worker");
      break;
    case RecordKind::kDrain:
      rec->worker = r.String("worker");
      rec->flag = r.Get<uint8_t>() != 0;
      break;
    case RecordKind::kSnapshotReady:
      rec->text = r.String("key");
      rec->flag = r.Get<uint8_t>() != 0;
      break;
    case RecordKind::kBye:
      break;
  }
}

bool KnownKind(uint8_t k) {
  return k >= static_cast<uint8_t>(RecordKind::kHello) &&
         k <= static_cast<uint8_t>(RecordKind::kSnapshotRequest);
}

}  // namespace

void AppendRecord(std::string* out, const Record& rec) {
  if (rec.kind == RecordKind::kLearn || rec.kind == RecordKind::kForget) {
    AppendBlocksRecord(out, rec.kind, rec.worker, rec.prompt_tokens, rec.blocks);
    return;
  }
  const size_t body = BeginRecord(out, rec.kind);
  switch (rec.kind) {
    case RecordKind::kHello:
    case RecordKind::kUnpin:
    case RecordKind::kSnapshotRequest:
      PutString(out, rec.text);
      break;
    case RecordKind::kLoads: {
      Put<uint8_t>(out, rec.flag ? 1 : 0);
      Put<int64_t>(out, rec.changed_unix_us);
      const auto n = static_cast<uint16_t>(std::min<size_t>(rec.loads.size(), UINT16_MAX));
      Put<uint16_t>(out, n);
      for (uint16_t i = 0; i < n; ++i) {
        const WorkerLoad& w = rec.loads[i];
        PutString(out, w.worker);
        Put<int64_t>(out, w.load.in_flight);
        Put<int64_t>(out, w.load.pending_prefill_tokens);
        Put<int64_t>(out, w.load.active_decode);
        Put<int64_t>(out, w.load.active_kv_blocks);
      }
      break;
    }
    case RecordKind::kPin:
      PutString(out, rec.text);
      PutString(out, rec.worker);
      break;
    case RecordKind::kDrain:
      PutString(out, rec.worker);
      Put<uint8_t>(out, rec.flag ? 1 : 0);
      break;
    case RecordKind::kSnapshotReady:
      PutString(out, rec.text);
      Put<uint8_t>(out, rec.flag ? 1 : 0);
      break;
    case RecordKind::kLearn:
    case RecordKind::kForget:
    case RecordKind::kBye:
      break;
  }
  EndRecord(out, body);
}

void AppendBlocksRecord(std::string* out, RecordKind kind, std::string_view worker,
                        uint32_t prompt_tokens, absl::Span<const kvindex::BlockHash> blocks) {
  const size_t body = BeginRecord(out, kind);
  PutString(out, worker);
  Put<uint32_t>(out, prompt_tokens);
  Put<uint32_t>(out, static_cast<uint32_t>(blocks.size()));
  if (!blocks.empty()) {
    out->append(reinterpret_cast<const char*>(blocks.data()),
                blocks.size() * sizeof(kvindex::BlockHash));
  }
  EndRecord(out, body);
}

std::string EncodeFrame(uint64_t sender, uint64_t seq, int64_t sent_unix_us, uint32_t count,
                        std::string_view records) {
  std::string out;
  out.reserve(kFrameHeaderBytes + records.size());
  Put<uint32_t>(&out, kFrameMagic);
  Put<uint8_t>(&out, kFrameVersion);
  Put<uint8_t>(&out, 0);
  Put<uint16_t>(&out, 0);
  Put<uint64_t>(&out, sender);
  Put<uint64_t>(&out, seq);
  Put<int64_t>(&out, sent_unix_us);
  Put<uint32_t>(&out, count);
  out.append(records);
  return out;
}

std::string EncodeFrame(const Frame& frame) {
  std::string records;
  for (const Record& r : frame.records) AppendRecord(&records, r);
  return EncodeFrame(frame.sender, frame.seq, frame.sent_unix_us,
                     static_cast<uint32_t>(frame.records.size()), records);
}

absl::StatusOr<Frame> DecodeFrame(std::string_view bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_frame_bytes) {
    return absl::InvalidArgumentError(
        common::StrCat("cluster frame of ", bytes.size(), " bytes, over ", limits.max_frame_bytes));
  }
  Reader r(bytes);
  Frame f;
  const auto magic = r.Get<uint32_t>();
  const auto version = r.Get<uint8_t>();
  r.Get<uint8_t>();
  r.Get<uint16_t>();
  if (r.ok() && magic != kFrameMagic) r.Fail("not a kvgate cluster frame");
  if (r.ok() && version != kFrameVersion) r.Fail(common::StrCat("frame version ", version));
  f.sender = r.Get<uint64_t>();
  f.seq = r.Get<uint64_t>();
  f.sent_unix_us = r.Get<int64_t>();
  const auto count = r.Get<uint32_t>();
  if (r.ok() && count > limits.max_records) {
    r.Fail(common::StrCat(count, " records, more than ", limits.max_records));
  }
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    const auto kind = r.Get<uint8_t>();
    const auto len = r.Get<uint32_t>();
    Reader body(r.Take(len));
    if (!r.ok() || !KnownKind(kind)) continue;  // unknown kinds are skipped whole
    Record rec;
    rec.kind = static_cast<RecordKind>(kind);
    ReadBody(body, limits, &rec);
    if (body.ok() && body.left() != 0) body.Fail("bytes after the record's body");
    if (!body.ok()) {
      r.Fail(common::StrCat("record ", i, ": ", body.error()));
      break;
    }
    f.records.push_back(std::move(rec));
  }
  if (r.ok() && r.left() != 0) r.Fail("bytes after the last record");
  if (!r.ok()) return absl::InvalidArgumentError(common::StrCat("cluster frame: ", r.error()));
  return f;
}

}  // namespace kvgate::router::cluster
