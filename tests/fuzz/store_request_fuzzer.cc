// libFuzzer target: kvgate-store's request decoder (store/wire.h), what the master runs on every
// frame from the network. Input: [frame header (16 bytes)][body]; the header is decoded, then
// the body as the request its op names. A decoded request must re-encode to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::store;
  if (size < kFrameHeaderSize) return 0;
  uint8_t header[kFrameHeaderSize];
  for (size_t i = 0; i < kFrameHeaderSize; ++i) header[i] = data[i];
  // Force the magic and version so that the fuzzer spends its time in the bodies.
  header[4] = kFrameMagic & 0xff;
  header[5] = kFrameMagic >> 8;
  header[6] = kProtocolVersion;
  auto h = DecodeFrameHeader(header);
  if (!h.ok()) return 0;
  std::string_view body(reinterpret_cast<const char*>(data + kFrameHeaderSize),
                        size - kFrameHeaderSize);
  auto req = DecodeRequest(h->op, body);
  if (!req.ok()) return 0;
  if (RequestOp(*req) != h->op) std::abort();
  if (EncodeRequest(*req) != body) std::abort();
  // Replies are decoded by clients from the same kind of bytes.
  GetResponse g;
  (void)Decode(body, &g);
  PutStartResponse p;
  (void)Decode(body, &p);
  HeartbeatResponse hb;
  (void)Decode(body, &hb);
  return 0;
}
