// The model hash a plan records (runtime/core/ModelHash.h): the graph and
// the weights' names and shapes count, the weights' values do not.
#include "FixtureTestUtil.h"

#include "runtime/core/ModelHash.h"

#include "onnx.pb.h"

#include <fstream>

using namespace megac;
using namespace megac::testing;

namespace {

onnx::ModelProto loadModel(const std::string &fixture) {
  onnx::ModelProto m;
  std::ifstream in(fixtureDir(fixture) + "/model.onnx", std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << fixture;
  return m;
}

} // namespace

TEST(ModelHash, WeightValuesDoNotCountTheGraphAndWeightShapesDo) {
  const onnx::ModelProto base = loadModel("llama");
  const uint64_t h = onnxModelHash(base);
  ASSERT_GT(base.graph().initializer_size(), 0);

  onnx::ModelProto m = base; // other values in a weight
  {
    onnx::TensorProto &t = *m.mutable_graph()->mutable_initializer(0);
    std::string raw = t.raw_data();
    ASSERT_FALSE(raw.empty());
    raw[0] = char(raw[0] ^ 0x55);
    t.set_raw_data(raw);
  }
  EXPECT_EQ(onnxModelHash(m), h);

  m = base; // a weight of another shape
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, base.graph().initializer(0).dims(0) + 1);
  EXPECT_NE(onnxModelHash(m), h);

  m = base; // a weight renamed
  m.mutable_graph()->mutable_initializer(0)->set_name("renamed");
  EXPECT_NE(onnxModelHash(m), h);

  m = base; // an op changed
  m.mutable_graph()->mutable_node(m.graph().node_size() - 1)->set_op_type("Identity");
  EXPECT_NE(onnxModelHash(m), h);

  // The same architecture exported another way is another model.
  EXPECT_NE(onnxModelHash(loadModel("llama_noopt")), h);
}
