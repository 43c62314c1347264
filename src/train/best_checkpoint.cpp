// The best evaluation's checkpoint (see best_checkpoint.h). Tested by
// tests/train/best_checkpoint_test.cpp.
#include "train/best_checkpoint.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"

namespace dflash::train {

namespace fs = std::filesystem;

std::optional<BestRecord> read_best(const fs::path& run_dir) {
    const fs::path p = run_dir / kBestDir / kBestJson;
    if (!fs::exists(p)) return std::nullopt;
    try {
        const nlohmann::json j = read_json_file(p);
        BestRecord b;
        b.metric = j.at("metric").get<std::string>();
        b.value = j.at("value").get<double>();
        b.step = j.at("step").get<int64_t>();
        return b;
    } catch (const nlohmann::json::exception& e) {
        DF_FAIL("{} is damaged ({}); remove it (the best checkpoint is then chosen anew)",
                p.string(), e.what());
    }
}

fs::path write_best(const fs::path& run_dir, const BestRecord& best, const TrainingState& state,
                    const ParamSet& params, const Tensor& m, const Tensor& v,
                    const std::function<void(const fs::path&)>& save_model) {
    const fs::path dir = run_dir / kBestDir;
    fs::create_directories(dir);
    const fs::path ckpt = write_checkpoint(dir, state, params, m, v, save_model);
    const nlohmann::json j = {{"metric", best.metric},
                              {"value", best.value},
                              {"step", best.step},
                              {"checkpoint", ckpt.filename().string()}};
    write_text_atomic(dir / kBestJson, j.dump(2) + "\n");
    // The new one is in place and named (`latest`, best.json): the older ones go.
    std::vector<fs::path> older;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory() && name.starts_with("checkpoint-") && e.path() != ckpt)
            older.push_back(e.path());
    }
    for (const fs::path& p : older) fs::remove_all(p);
    return ckpt;
}

}  // namespace dflash::train
