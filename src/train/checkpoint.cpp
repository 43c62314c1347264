// Training checkpoints. Tested by tests/train/checkpoint_test.cpp.
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include "config/settings.h"
#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json_int.h"
#include "core/safetensors.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

// Tensor names in training_state.safetensors.
std::string master_key(const std::string& n) {
    return "master." + n;
}
std::string m_key(const std::string& n) {
    return "adam_m." + n;
}
std::string v_key(const std::string& n) {
    return "adam_v." + n;
}

// Every parameter's f32 master weights and Adam moments, named per parameter.
void write_state_tensors(const fs::path& path, const ParamSet& params, const Tensor& m,
                         const Tensor& v) {
    const Tensor weights = params.training() ? params.flat_master() : params.flat_values();
    // Host f32 weights (the checkpoint writer's snapshot) are written as they are; others are
    // copied to the host first.
    const bool host_f32 = weights.device().kind == DeviceKind::cpu && weights.dtype() == DType::f32;
    const HostTensor copy = host_f32 ? HostTensor() : to_host_f32(params.backend(), weights);
    const Tensor master = host_f32 ? weights : copy.view();
    DF_ASSERT(m.numel() == params.numel() && v.numel() == params.numel(),
              "checkpoint moments of {} and {} elements for {} parameters", m.numel(), v.numel(),
              params.numel());
    DF_ASSERT(m.device().kind == DeviceKind::cpu && v.device().kind == DeviceKind::cpu &&
                  m.dtype() == DType::f32 && v.dtype() == DType::f32,
              "checkpoint moments must be f32 host memory, got {} and {}", m.describe(),
              v.describe());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Param& p : params.params()) {
        auto part = [&](const Tensor& flat) {
            return flat.reshape({flat.numel()})
                .rows(p.offset, p.offset + p.shape.numel())
                .reshape(p.shape);
        };
        tensors.emplace_back(master_key(p.name), part(master));
        tensors.emplace_back(m_key(p.name), part(m));
        tensors.emplace_back(v_key(p.name), part(v));
    }
    write_safetensors(path, tensors, {{"format", "dflash-training-state"}}, DType::f32);
}

void read_into(const SafetensorsFile& f, const std::string& key, const Param& p,
               const HostTensor& flat) {
    DF_CHECK(f.has(key), "'{}' has no tensor '{}'; was the checkpoint written for another model?",
             f.path().string(), key);
    HostTensor t = f.read_f32(key);
    DF_CHECK(t.shape() == p.shape, "'{}': tensor '{}' has shape {} but the model needs {}",
             f.path().string(), key, t.shape().to_string(), p.shape.to_string());
    copy_tensor(flat.view().rows(p.offset, p.offset + p.shape.numel()),
                t.view().reshape({t.numel()}));
}

// A small text file of the run (the `latest` pointer): a regular file, bounded (input_file.h).
std::string read_text(const fs::path& p) {
    return read_input_file(p, kMaxJsonFileBytes, "run file");
}

template <class T>
T field(const nlohmann::json& j, const char* key) {
    DF_CHECK(j.contains(key),
             "training_state.json has no \"{}\"; is it from another dflash "
             "version?",
             key);
    // Integers exactly: a get<int64_t>() of a step of 1e30 gave -9223372036854775808.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        return json_integer<T>(j.at(key), fmt::format("training_state.json: \"{}\"", key));
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception& e) {
        DF_FAIL("training_state.json: \"{}\" has the wrong type ({})", key, e.what());
    }
}

nlohmann::json identity_to_json(const DatasetIdentity& d) {
    return {{"digest", d.digest},
            {"path", d.path},
            {"samples", d.samples},
            {"tokens", d.tokens},
            {"shards", d.shards}};
}

DatasetIdentity identity_from_json(const nlohmann::json& j) {
    DF_CHECK(j.is_object(), "training_state.json: \"data\" must be an object");
    DatasetIdentity d;
    d.digest = field<std::string>(j, "digest");
    d.path = field<std::string>(j, "path");
    d.samples = field<int64_t>(j, "samples");
    d.tokens = field<int64_t>(j, "tokens");
    d.shards = field<int64_t>(j, "shards");
    return d;
}

// The tensors of training_state.safetensors with NaN or infinite values, each described.
std::vector<std::string> nonfinite_tensors(const SafetensorsFile& f) {
    std::vector<std::string> out;
    for (const std::string& key : f.names()) {
        const SafetensorsFile::NonFinite nf = f.nonfinite(key);
        if (nf.count == 0) continue;
        const SafetensorsEntry& e = f.entry(key);
        out.push_back(fmt::format(
            "'{}': {}", key,
            describe_nonfinite(
                nf, static_cast<int64_t>(e.nbytes() / safetensors_dtype_size(e.dtype)))));
    }
    return out;
}

// The first three of `problems`, and how many more there are.
std::string first_few(std::vector<std::string> problems) {
    if (problems.size() > 3) {
        const size_t more = problems.size() - 3;
        problems.resize(3);
        problems.push_back(fmt::format("{} more", more));
    }
    return fmt::format("{}", fmt::join(problems, "; "));
}

}  // namespace

std::string DatasetIdentity::describe() const {
    return fmt::format("{} ({} samples, {} tokens in {} shard(s), digest {})", path, samples,
                       tokens, shards, digest);
}

DatasetIdentity dataset_identity(const ShardedDataset& ds) {
    DatasetIdentity d;
    std::string key = fmt::format("tokenizer={}\nvocab={}\n", ds.tokenizer_name(), ds.vocab_size());
    for (const ShardReader& s : ds.shards()) {
        const ShardInfo& i = s.info();
        key += fmt::format("shard samples={} tokens={} checksum={:016x}\n", i.num_samples,
                           i.num_tokens, i.content_checksum);
    }
    d.digest = fmt::format("{:016x}", config::fnv1a64(key));
    if (!ds.shards().empty()) d.path = ds.shards().front().path().parent_path().string();
    d.samples = ds.num_samples();
    d.tokens = ds.num_tokens();
    d.shards = ds.num_shards();
    return d;
}

nlohmann::json training_state_to_json(const TrainingState& s) {
    nlohmann::json loaders = nlohmann::json::array();
    for (const auto& l : s.loaders) loaders.push_back(loader_state_to_json(l));
    nlohmann::json j = {{"format_version", kTrainingStateVersion},
                        {"kind", s.kind},
                        {"step", s.step},
                        {"total_steps", s.total_steps},
                        {"epoch", s.epoch},
                        {"loaders", loaders},
                        {"rng", {{"seed", s.seed}, {"anchor_seed", s.anchor_seed}}},
                        {"settings_hash", s.settings_hash},
                        {"settings_toml", s.settings_toml}};
    if (s.data) j["data"] = identity_to_json(*s.data);
    return j;
}

TrainingState training_state_from_json(const nlohmann::json& j) {
    DF_CHECK(j.is_object(), "training_state.json must hold a JSON object");
    const int version = field<int>(j, "format_version");
    DF_CHECK(version == kTrainingStateVersion,
             "training_state.json has format_version {} but this dflash reads version {}", version,
             kTrainingStateVersion);
    TrainingState s;
    s.kind = field<std::string>(j, "kind");
    DF_CHECK(s.kind == "drafter" || s.kind == "target",
             "training_state.json: \"kind\" is \"{}\"; expected \"drafter\" or \"target\"", s.kind);
    s.step = field<int64_t>(j, "step");
    s.total_steps = field<int64_t>(j, "total_steps");
    s.epoch = field<int64_t>(j, "epoch");
    DF_CHECK(s.step >= 1,
             "training_state.json: \"step\" is {}; a checkpoint is written after at least one "
             "optimizer step (step >= 1); the file is damaged",
             s.step);
    DF_CHECK(s.total_steps >= s.step,
             "training_state.json: \"total_steps\" is {}, below \"step\" {}; the file is damaged",
             s.total_steps, s.step);
    DF_CHECK(s.epoch >= 0, "training_state.json: \"epoch\" is {}; it must be >= 0", s.epoch);
    const auto loaders = field<nlohmann::json>(j, "loaders");
    DF_CHECK(loaders.is_array() && !loaders.empty(),
             "training_state.json: \"loaders\" must be a non-empty array (one per worker)");
    for (const auto& l : loaders) {
        s.loaders.push_back(loader_state_from_json(l));
        DF_CHECK(s.loaders.back().epoch >= 0 && s.loaders.back().cursor >= 0,
                 "training_state.json: loader state {} of worker {} is negative; the file is "
                 "damaged",
                 l.dump(), s.loaders.size() - 1);
    }
    const auto rng = field<nlohmann::json>(j, "rng");
    s.seed = field<uint64_t>(rng, "seed");
    s.anchor_seed = field<uint64_t>(rng, "anchor_seed");
    s.settings_hash = field<std::string>(j, "settings_hash");
    s.settings_toml = field<std::string>(j, "settings_toml");
    if (j.contains("data")) s.data = identity_from_json(j.at("data"));
    return s;
}

std::string checkpoint_name(int64_t step) {
    return fmt::format("checkpoint-{:06d}", step);
}

fs::path write_checkpoint(const fs::path& run_dir, const TrainingState& state,
                          const ParamSet& params, const Tensor& m, const Tensor& v,
                          const std::function<void(const fs::path&)>& save_model) {
    const fs::path final_dir = run_dir / checkpoint_name(state.step);
    const fs::path tmp = run_dir / (".tmp-" + checkpoint_name(state.step));
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    try {
        save_model(tmp);
        write_state_tensors(tmp / kTrainingStateTensors, params, m, v);
        write_text_atomic(tmp / kTrainingStateJson, training_state_to_json(state).dump(2) + "\n");
        write_text_atomic(tmp / kRunSettingsFile, state.settings_toml);
        // rename() cannot replace a non-empty directory: a checkpoint of this step from an
        // earlier attempt is removed first (its content is what we are about to rewrite).
        fs::remove_all(final_dir);
        fs::rename(tmp, final_dir);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    write_text_atomic(run_dir / kLatestFile, final_dir.filename().string() + "\n");
    return final_dir;
}

TrainingState read_training_state(const fs::path& checkpoint_dir) {
    const fs::path p = checkpoint_dir / kTrainingStateJson;
    DF_CHECK(fs::exists(p), "'{}' is not a training checkpoint: it has no {}",
             checkpoint_dir.string(), kTrainingStateJson);
    try {
        return training_state_from_json(read_json_file(p));
    } catch (const Error& e) {
        DF_FAIL("{}: {}", p.string(), e.what());
    }
}

void load_optimizer_state(const fs::path& checkpoint_dir, int64_t optimizer_steps, ParamSet& params,
                          AdamW& opt) {
    const SafetensorsFile f = SafetensorsFile::open(checkpoint_dir / kTrainingStateTensors);
    const HostTensor master({params.numel()}), m({params.numel()}), v({params.numel()});
    for (const Param& p : params.params()) {
        read_into(f, master_key(p.name), p, master);
        read_into(f, m_key(p.name), p, m);
        read_into(f, v_key(p.name), p, v);
    }
    Backend& be = params.backend();
    from_host_f32(be, params.flat_master(), master.view());
    params.sync_values_from_master();
    // The file holds every moment, whatever the sharding it was written with: this worker takes
    // its shard's (so a run resumes with any number of workers).
    const FlatShard& sh = opt.shard();
    const int64_t c = sh.chunk;
    for (auto [dst, src] : {std::pair{opt.m(), &m}, std::pair{opt.v(), &v}}) {
        if (c > 0) from_host_f32(be, dst.rows(0, c), shard_chunk(src->view(), sh));
        if (sh.owned() > c) from_host_f32(be, dst.rows(c, sh.owned()), shard_tail(src->view(), sh));
    }
    opt.set_steps_done(optimizer_steps);
}

void check_training_state_files(const fs::path& checkpoint_dir) {
    const CheckpointReader model = CheckpointReader::open(checkpoint_dir);
    const SafetensorsFile f = SafetensorsFile::open(checkpoint_dir / kTrainingStateTensors);
    std::vector<std::string> problems;
    for (const std::string& name : model.names()) {
        for (const std::string& key : {master_key(name), m_key(name), v_key(name)}) {
            if (!f.has(key))
                problems.push_back(fmt::format("no '{}'", key));
            else if (f.entry(key).shape != model.shape(name))
                problems.push_back(fmt::format("'{}' has shape [{}] but the model's is [{}]", key,
                                               fmt::join(f.entry(key).shape, ", "),
                                               fmt::join(model.shape(name), ", ")));
        }
    }
    DF_CHECK(problems.empty(),
             "'{}' does not match the checkpoint's model: {}; was it written for another model or "
             "damaged?",
             f.path().string(), first_few(problems));
    // The values too: a resume would load them only after it has written the run's settings.
    const std::vector<std::string> nonfinite = nonfinite_tensors(f);
    DF_CHECK(nonfinite.empty(),
             "'{}' holds NaN or infinite values, so this checkpoint cannot be resumed: {}; the run "
             "diverged before it was written or the file is damaged: resume from an earlier "
             "checkpoint (`dflash inspect {}` reports the training state)",
             f.path().string(), first_few(nonfinite), checkpoint_dir.string());
}

void describe_training_state(const fs::path& checkpoint_dir, bool check_values, std::string& text,
                             std::vector<std::string>& problems) {
    TrainingState s;
    try {
        s = read_training_state(checkpoint_dir);
    } catch (const Error& e) {
        problems.push_back(e.what());
        return;
    }
    const LoaderState& w0 = s.loaders.front();
    text += fmt::format(
        "training state: {}, step {} of {}, epoch {}; {} worker(s), worker 0 at "
        "sequence {} of epoch {}\n",
        s.kind, s.step, s.total_steps, s.epoch, s.loaders.size(), w0.cursor, w0.epoch);
    text += fmt::format("  data:        {}\n", s.data ? s.data->describe()
                                                      : std::string("not recorded (an older "
                                                                    "dflash wrote it)"));
    text += fmt::format("  settings:    hash {}\n", s.settings_hash);
    std::optional<SafetensorsFile> f;
    try {
        f.emplace(SafetensorsFile::open(checkpoint_dir / kTrainingStateTensors));
    } catch (const Error& e) {
        problems.push_back(fmt::format("the training state cannot be resumed: {}", e.what()));
        return;
    }
    int64_t values = 0;
    for (const std::string& key : f->names()) {
        const SafetensorsEntry& e = f->entry(key);
        values +=
            static_cast<int64_t>(e.nbytes() / std::max<size_t>(1, safetensors_dtype_size(e.dtype)));
    }
    text += fmt::format("  tensors:     {} (master, adam_m, adam_v per parameter), {} values\n",
                        f->names().size(), values);
    if (!check_values) return;
    const std::vector<std::string> nonfinite = nonfinite_tensors(*f);
    text += fmt::format("  finite:      {}\n",
                        nonfinite.empty() ? std::string("yes, every value")
                                          : fmt::format("no: {} tensor(s) hold NaN or infinite "
                                                        "values",
                                                        nonfinite.size()));
    for (const std::string& n : nonfinite)
        problems.push_back(
            fmt::format("{}: tensor {}; resume from an earlier checkpoint", f->path().string(), n));
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
    const fs::path p = run_dir / kLatestFile;
    if (!fs::exists(p)) return std::nullopt;
    std::string name = read_text(p);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    DF_CHECK(!name.empty() && name.find('/') == std::string::npos,
             "'{}' should name a checkpoint directory of the run, but holds '{}'", p.string(),
             name);
    const fs::path dir = run_dir / name;
    DF_CHECK(fs::is_directory(dir), "'{}' names '{}', which does not exist", p.string(), name);
    return dir;
}

fs::path resolve_resume_dir(const fs::path& dir) {
    DF_CHECK(fs::is_directory(dir),
             "--resume '{}' is not a directory; give a checkpoint "
             "directory or a run directory",
             dir.string());
    if (fs::exists(dir / kTrainingStateJson)) return dir;
    const auto latest = latest_checkpoint(dir);
    DF_CHECK(latest.has_value(),
             "--resume '{}' is neither a checkpoint (no {}) nor a run "
             "directory with checkpoints (no '{}' file)",
             dir.string(), kTrainingStateJson, kLatestFile);
    return *latest;
}

}  // namespace dflash::train
