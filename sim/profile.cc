#include "sim/profile.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/strings.h"
#include "sim/builtin_profiles.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::sim {

std::string_view KvGroupKindName(KvGroupKind kind) {
  switch (kind) {
    case KvGroupKind::kFullAttention:
      return "full_attention";
    case KvGroupKind::kSlidingWindow:
      return "sliding_window";
    case KvGroupKind::kMamba:
      return "mamba";
  }
  return "full_attention";
}

std::vector<KvGroupSpec> Profile::KvGroups() const {
  if (!groups.empty()) return groups;
  return {KvGroupSpec{KvGroupKind::kFullAttention, 0, num_gpu_blocks}};
}

void Profile::SetNumGpuBlocks(uint32_t n) {
  if (!groups.empty() && groups[0].num_gpu_blocks > 0) {
    const uint64_t old = groups[0].num_gpu_blocks;
    for (size_t i = 1; i < groups.size(); ++i) {
      groups[i].num_gpu_blocks = static_cast<uint32_t>(
          std::max<uint64_t>(1, (uint64_t{groups[i].num_gpu_blocks} * n + old / 2) / old));
    }
    groups[0].num_gpu_blocks = n;
  }
  num_gpu_blocks = n;
}

namespace {

absl::Status ValidateGroups(const Profile& p) {
  auto bad = [](size_t i, const std::string& why) {
    return absl::InvalidArgumentError(common::StrCat("profile: groups[", i, "]: ", why));
  };
  if (p.groups.empty()) return absl::OkStatus();
  if (p.groups.size() > 2) {
    return absl::InvalidArgumentError(
        "profile: groups: at most one group beside full attention (kvgate-sim models one "
        "full-attention group and one sliding-window or Mamba group)");
  }
  if (p.groups[0].kind != KvGroupKind::kFullAttention) {
    return bad(0, "group 0 must be full_attention");
  }
  if (p.groups[0].num_gpu_blocks != p.num_gpu_blocks) {
    return bad(0, "num_gpu_blocks differs from the top-level num_gpu_blocks");
  }
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const KvGroupSpec& g = p.groups[i];
    if (g.num_gpu_blocks == 0) return bad(i, "num_gpu_blocks must be > 0");
    if (i > 0 && g.kind == KvGroupKind::kFullAttention) {
      return bad(i, "only group 0 is full_attention");
    }
    if ((g.kind == KvGroupKind::kSlidingWindow) != (g.sliding_window > 0)) {
      return bad(i, "sliding_window (tokens, > 0) is set exactly for kind sliding_window");
    }
    // One request alone must always fit, or it would wait forever: its window plus one chunk
    // (sliding window), its state, checkpoint and next checkpoint (Mamba).
    const uint64_t min_blocks =
        g.kind == KvGroupKind::kSlidingWindow
            ? (uint64_t{g.sliding_window} + p.max_num_batched_tokens + p.block_size - 1) /
                      p.block_size +
                  2
        : g.kind == KvGroupKind::kMamba ? 3
                                        : 1;
    if (g.num_gpu_blocks < min_blocks) {
      return bad(i, common::StrCat("num_gpu_blocks must be >= ", min_blocks,
                                   " (one request's blocks in this group)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KvGroupSpec>> ParseGroups(const YAML::Node& node) {
  if (!node.IsSequence()) {
    return absl::InvalidArgumentError(
        common::StrCat("profile: line ", node.Mark().line + 1, ": groups must be a list of maps"));
  }
  std::vector<KvGroupSpec> out;
  for (const auto& g : node) {
    if (!g.IsMap()) {
      return absl::InvalidArgumentError(
          common::StrCat("profile: line ", g.Mark().line + 1, ": a group must be a map"));
    }
    KvGroupSpec spec;
    for (const auto& kv : g) {
      const std::string key = kv.first.as<std::string>();
      if (key == "kind") {
        const std::string kind = kv.second.as<std::string>();
        if (kind == "full_attention") {
          spec.kind = KvGroupKind::kFullAttention;
        } else if (kind == "sliding_window") {
          spec.kind = KvGroupKind::kSlidingWindow;
        } else if (kind == "mamba") {
          spec.kind = KvGroupKind::kMamba;
        } else {
          return absl::InvalidArgumentError(
              common::StrCat("profile: line ", kv.second.Mark().line + 1, ": unknown group kind ",
                             kind, " (full_attention, sliding_window or mamba)"));
        }
      } else if (key == "sliding_window") {
        spec.sliding_window = kv.second.as<uint32_t>();
      } else if (key == "num_gpu_blocks") {
        spec.num_gpu_blocks = kv.second.as<uint32_t>();
      } else {
        return absl::InvalidArgumentError(common::StrCat("profile: line ", kv.first.Mark().line + 1,
                                                         ": unknown group key ", key));
      }
    }
    out.push_back(spec);
  }
  return out;
}

}  // namespace

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
  return ValidateGroups(*this);
}

absl::StatusOr<Profile> ParseProfile(const std::string& yaml) {
  Profile p;
  std::optional<uint32_t> top_gpu_blocks;
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
        top_gpu_blocks = p.num_gpu_blocks;
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
      } else if (key == "groups") {
        auto groups = ParseGroups(v);
        if (!groups.ok()) return groups.status();
        p.groups = std::move(*groups);
      } else {
        return absl::InvalidArgumentError(
            common::StrCat("profile: line ", kv.first.Mark().line + 1, ": unknown key ", key));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(common::StrCat("profile: ", e.what()));
  }
  // Group 0's pool is the top-level num_gpu_blocks: either may be given (both: they must agree).
  if (!p.groups.empty()) {
    if (p.groups[0].num_gpu_blocks == 0) {
      p.groups[0].num_gpu_blocks = p.num_gpu_blocks;
    } else if (!top_gpu_blocks) {
      p.num_gpu_blocks = p.groups[0].num_gpu_blocks;
    }
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

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> out;
  for (const BuiltinProfile& b : BuiltinProfiles()) out.emplace_back(b.name);
  return out;
}

absl::StatusOr<Profile> LoadProfileByNameOrPath(const std::string& name_or_path) {
  for (const BuiltinProfile& b : BuiltinProfiles()) {
    if (b.name != name_or_path) continue;
    auto p = ParseProfile(std::string(b.yaml));
    if (!p.ok()) {
      return absl::InternalError(
          common::StrCat("built-in profile ", name_or_path, ": ", p.status().message()));
    }
    return p;
  }
  auto p = LoadProfile(name_or_path);
  if (absl::IsNotFound(p.status())) {
    return absl::NotFoundError(
        common::StrCat(p.status().message(), " (nor is it a built-in ",
                       "profile: ", common::StrJoin(BuiltinProfileNames(), ", "), ")"));
  }
  return p;
}

}  // namespace kvgate::sim
