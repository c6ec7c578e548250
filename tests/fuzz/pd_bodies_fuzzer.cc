// libFuzzer target: the P/D body rewrites on arbitrary client bodies. Each either refuses the
// body with an error or returns one JSON object that parses again, holds the members it set
// and none it removed; nothing may crash, leak or read out of bounds.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "router/pd/pd_bodies.h"
#include "simdjson.h"

namespace {

namespace od = simdjson::ondemand;

// The rewritten body's top-level members: aborts unless it is one valid JSON object.
void CheckObject(const std::string& json, bool expect_stream_false) {
  simdjson::padded_string padded(json);
  od::parser parser;
  od::document doc;
  od::object obj;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(obj)) std::abort();
  bool stream_false = false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) std::abort();
    od::value v;
    if (field.value().get(v)) std::abort();
    if (key == "stream_options" || key == "min_tokens") {
      if (expect_stream_false) std::abort();  // removed from prefill bodies
    }
    if (key == "stream") {
      bool b = true;
      if (!v.get_bool().get(b) && !b) stream_false = true;
    } else {
      // Walk every value: a malformed one would fail here.
      std::string_view raw;
      od::json_type t;
      if (v.type().get(t)) std::abort();
      if (t == od::json_type::object) {
        od::object o;
        if (v.get_object().get(o) || o.raw_json().get(raw)) std::abort();
      } else if (t == od::json_type::array) {
        od::array a;
        if (v.get_array().get(a) || a.raw_json().get(raw)) std::abort();
      }
    }
  }
  if (expect_stream_false && !stream_false) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  using namespace kvgate::router::pd;
  if (auto prefill = VllmPrefillBody(body, kNixlPrefillParams); prefill.ok()) {
    CheckObject(*prefill, true);
    // Decode keeps the original members: rewriting its own output again must still parse.
    if (auto decode = VllmDecodeBody(*prefill, kMooncakePrefillParams); decode.ok()) {
      CheckObject(*decode, false);
    } else {
      std::abort();  // a body kvgate produced is always accepted
    }
  }
  if (auto sglang = SglangBody(body, "fd00::1", 8998, size); sglang.ok()) {
    CheckObject(*sglang, false);
  }
  (void)KvTransferParamsOf(body);
  // A client's transfer fields dropped: one object again, none of them left in it.
  if (auto clean = DropTransferFields(body)) {
    CheckObject(*clean, false);
    if (DropTransferFields(*clean).has_value()) std::abort();
  }
  return 0;
}
