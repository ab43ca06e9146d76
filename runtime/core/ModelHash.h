#pragma once
// What identifies an ONNX model for a plan compiled from it: its graph (opset
// imports; inputs and outputs with their types; every node's type, domain,
// inputs, outputs and attributes) and its weights' names, element types and
// shapes, not their bytes: cheap for any size of model, and unchanged when
// only the weights' values change. The frontend records it in the graph,
// codegen in the plan (Plan.model_hash), and the runtime compares the ONNX
// file it reads weights from.
#include <cstdint>

namespace onnx {
class ModelProto;
}

namespace megac {

uint64_t onnxModelHash(const onnx::ModelProto &m);

} // namespace megac
