// A small registry with one setting of every type (and a three-level key) for the config unit
// tests, so that they do not depend on the catalog; catalog_test.cpp covers the real one.
#pragma once

#include <memory>

#include "config/registry.h"

namespace dflash::config::test {

inline std::shared_ptr<const Registry> small_registry() {
    using D = Declaration;
    Registry r;
    r.add(D::boolean("cuda_graphs.enabled", true, "capture graphs").read_by("graph cache"));
    r.add(D::enumeration("cuda_graphs.capture_mode", "thread_local",
                         {"thread_local", "global", "relaxed"}, "capture mode"));
    r.add(D::integer("train.epochs", 6, "passes").range(1, 100));
    r.add(D::real("train.lr", 6e-4, "learning rate").range(0, 10));
    r.add(D::string("train.output_dir", "runs/drafter", "run directory"));
    r.add(D::int_list("drafter.target_layer_ids", {}, "layers").range(0, 63));
    r.add(D::float_list("train.betas", {0.9, 0.95}, "betas").range(0, 1));
    r.add(D::string_list("data.files", {"a.jsonl"}, "inputs"));
    r.add(D::integer("model.rope.base", 10000, "a three-level key").range(1, {}));
    return std::make_shared<const Registry>(std::move(r));
}

}  // namespace dflash::config::test
