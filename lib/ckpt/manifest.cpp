// Names and the JSON form of shard manifests (gathered to rank 0; stored in index.h5 as pieces_json).
//   {"rank": 3, "file": "shard_00003.h5", "pieces": [{"dataset": "model/wte", "file_dataset": "model/wte/piece_0",
//    "global_shape": [...], "offset": [...], "count": [...], "split_axis": 0, "replica": 0, "dtype": "f32",
//    "crc32c": 3808858755}, ...]}
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string tmp_step_dir_name(int64_t step) { return fmt::format(".tmp_step_{:08d}", step); }
std::string shard_file_name(int rank) { return fmt::format("shard_{:05d}.h5", rank); }

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::F32, DType::I32, DType::F64, DType::I64, DType::U8})
    if (name == dtype_name(t)) return t;
  HPCT_FAIL("unknown dtype name '{}' (expected f32, i32, f64, i64 or u8)", name);
}

std::string ShardManifest::to_json() const {
  nlohmann::json pieces_json = nlohmann::json::array();
  for (const auto& p : pieces) {
    pieces_json.push_back({{"dataset", p.dataset},
                           {"file_dataset", p.file_dataset},
                           {"global_shape", p.global_shape},
                           {"offset", p.offset},
                           {"count", p.count},
                           {"split_axis", p.split_axis},
                           {"replica", p.replica},
                           {"dtype", dtype_name(p.dtype)},
                           {"crc32c", p.crc}});
  }
  return nlohmann::json{{"rank", rank}, {"file", file}, {"pieces", std::move(pieces_json)}}.dump();
}

ShardManifest ShardManifest::from_json(const std::string& text) {
  ShardManifest m;
  try {
    const auto j = nlohmann::json::parse(text);
    m.rank = j.at("rank").get<int>();
    m.file = j.at("file").get<std::string>();
    for (const auto& pj : j.at("pieces")) {
      PieceRecord p;
      p.dataset = pj.at("dataset").get<std::string>();
      p.file_dataset = pj.at("file_dataset").get<std::string>();
      p.global_shape = pj.at("global_shape").get<std::vector<int64_t>>();
      p.offset = pj.at("offset").get<std::vector<int64_t>>();
      p.count = pj.at("count").get<std::vector<int64_t>>();
      p.split_axis = pj.at("split_axis").get<int>();
      p.replica = pj.at("replica").get<int>();
      p.dtype = dtype_from_name(pj.at("dtype").get<std::string>());
      p.crc = pj.at("crc32c").get<uint32_t>();
      m.pieces.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    HPCT_FAIL("malformed shard manifest JSON: {} (text starts: {:.120})", e.what(), text);
  }
  return m;
}

}  // namespace hpct::ckpt
