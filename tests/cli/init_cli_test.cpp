// `dflash init` writes random targets and drafters of the requested size that load, pass
// `dflash inspect`, and pair with each other; non-empty outputs are refused.
#include "model/drafter.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

TEST(InitCli, TargetAndDrafterOfAnySize) {
    test::TempDir dir("init");
    const auto t = dir / "t", d = dir / "d";
    auto r = test::run_dflash("init target --output " + t.string() +
                              " --pretrain.hidden_size 48 --pretrain.num_layers 3"
                              " --pretrain.num_heads 3 --pretrain.num_kv_heads 1"
                              " --pretrain.head_dim 16 --pretrain.intermediate_size 72");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const TargetModel tm = TargetModel::load(test::host_backend(), t);
    EXPECT_EQ(tm.config().hidden_size, 48);
    EXPECT_EQ(tm.config().num_hidden_layers, 3);
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + d.string() +
                         " --drafter.block_size 6 --drafter.num_layers 2 --dtype f32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const DrafterModel dm = DrafterModel::load(test::host_backend(), d);
    EXPECT_EQ(dm.block_size(), 6);
    EXPECT_EQ(dm.config().layer.num_hidden_layers, 2);
    EXPECT_EQ(dm.config().num_target_layers, 3);
    EXPECT_EQ(test::run_dflash("inspect " + t.string()).exit_code, 0);
    EXPECT_EQ(test::run_dflash("inspect " + d.string()).exit_code, 0);
    r = test::run_dflash("init target --output " + t.string());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("not empty"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dflash
