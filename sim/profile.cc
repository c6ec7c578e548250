#include "sim/profile.h"

#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::sim {

absl::Status Profile::Validate() const {
  auto bad = [](const char* field, const char* why) {
    return absl::InvalidArgumentError(common::StrCat("profile: ", field, " ", why));
  };
  if (block_size == 0) return bad("block_size", "must be > 0");
  if (num_gpu_blocks == 0) return bad("num_gpu_blocks", "must be > 0");
  if (max_num_seqs == 0) return bad("max_num_seqs", "must be > 0");
  if (max_num_batched_tokens == 0) return bad("max_num_batched_tokens", "must be > 0");
  if (max_model_len == 0) return bad("max_model_len", "must be > 0");
  for (double v : {step_fixed_s, prefill_per_token_s, prefill_per_token_ctx_s, decode_per_seq_s,
                   decode_per_kv_token_s, cpu_load_per_block_s}) {
    if (!(v >= 0)) return bad("time costs", "must be >= 0");
  }
  if (!(store_bandwidth_bytes_per_s > 0)) return bad("store_bandwidth_bytes_per_s", "must be > 0");
  if (!(pd_bandwidth_bytes_per_s > 0)) return bad("pd_bandwidth_bytes_per_s", "must be > 0");
  if (store_bytes_per_token == 0 || store_bytes_per_token > 65536)
    return bad("store_bytes_per_token", "must be in [1, 65536]");
  if (step_fixed_s + prefill_per_token_s + decode_per_seq_s <= 0) {
    return bad("time costs", "must not all be zero (steps would take no time)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Profile> ParseProfile(const std::string& yaml) {
  Profile p;
  try {
    const YAML::Node root = YAML::Load(yaml);
    if (!root.IsMap()) return absl::InvalidArgumentError("profile: top level must be a map");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "name") {
        p.name = v.as<std::string>();
      } else if (key == "block_size") {
        p.block_size = v.as<uint32_t>();
      } else if (key == "num_gpu_blocks") {
        p.num_gpu_blocks = v.as<uint32_t>();
      } else if (key == "num_cpu_blocks") {
        p.num_cpu_blocks = v.as<uint32_t>();
      } else if (key == "max_num_seqs") {
        p.max_num_seqs = v.as<uint32_t>();
      } else if (key == "max_num_batched_tokens") {
        p.max_num_batched_tokens = v.as<uint32_t>();
      } else if (key == "max_model_len") {
        p.max_model_len = v.as<uint32_t>();
      } else if (key == "step_fixed_s") {
        p.step_fixed_s = v.as<double>();
      } else if (key == "prefill_per_token_s") {
        p.prefill_per_token_s = v.as<double>();
      } else if (key == "prefill_per_token_ctx_s") {
        p.prefill_per_token_ctx_s = v.as<double>();
      } else if (key == "decode_per_seq_s") {
        p.decode_per_seq_s = v.as<double>();
      } else if (key == "decode_per_kv_token_s") {
        p.decode_per_kv_token_s = v.as<double>();
      } else if (key == "cpu_load_per_block_s") {
        p.cpu_load_per_block_s = v.as<double>();
      } else if (key == "kv_bytes_per_token") {
        p.kv_bytes_per_token = v.as<uint64_t>();
      } else if (key == "store_bandwidth_bytes_per_s") {
        p.store_bandwidth_bytes_per_s = v.as<double>();
      } else if (key == "store_bytes_per_token") {
        p.store_bytes_per_token = v.as<uint32_t>();
      } else if (key == "pd_bandwidth_bytes_per_s") {
        p.pd_bandwidth_bytes_per_s = v.as<double>();
      } else {
        return absl::InvalidArgumentError(
            common::StrCat("profile: line ", kv.first.Mark().line + 1, ": unknown key ", key));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(common::StrCat("profile: ", e.what()));
  }
  if (auto s = p.Validate(); !s.ok()) return s;
  return p;
}

absl::StatusOr<Profile> LoadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(common::StrCat("cannot read profile ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto p = ParseProfile(ss.str());
  if (!p.ok()) {
    return absl::InvalidArgumentError(common::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

}  // namespace kvgate::sim
