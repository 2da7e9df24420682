// aoti_runner: serves an AOTInductor package that calls convt::conv_transpose1d, without Python.
//
//   aoti_runner LIBRARY PACKAGE DEVICE INPUTS OUTPUTS
//
// LIBRARY  torch_convt_op's compiled library, torch_convt_op/_C.abi3.so (python -c "import
//          torch_convt_op; print(torch_convt_op.LIBRARY_PATH)"). Loading it runs its static
//          initialisers, which register the op's schemas and kernels with torch's dispatcher.
// PACKAGE  a .pt2 from torch._inductor.aoti_compile_and_package, compiled for DEVICE's type.
// DEVICE   cpu, cuda or cuda:N: where the inputs go.
// INPUTS   a list of tensors saved by Python's torch.save([x0, x1, ...], INPUTS): the model runs
//          once on each.
// OUTPUTS  each run's first output, on the CPU, saved as a list that Python's torch.load reads.
//
// Prints the time to load the package and each run's time (the device synchronised) to stdout.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path);
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void synchronize(const c10::Device& device) {
  if (device.type() != c10::DeviceType::CPU) {
    const c10::impl::DeviceGuardImplInterface* guard = c10::impl::getDeviceGuardImpl(device.type());
    // "cuda" has no index (-1): the current device, where the inputs went
    guard->synchronizeDevice(device.has_index() ? device.index() : guard->getDevice().index());
  }
}

int run(const std::string& library, const std::string& package, const c10::Device& device,
        const std::string& inputs_path, const std::string& outputs_path) {
  // The op first: a package that calls convt::conv_transpose1d finds it in the dispatcher at run time.
  if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "aoti_runner: cannot load %s: %s\n", library.c_str(), dlerror());
    return 1;
  }
  c10::InferenceMode inference;
  const c10::IValue saved = torch::jit::pickle_load(read_file(inputs_path));
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& value : saved.toListRef()) {
    inputs.push_back(value.toTensor().to(device));
  }
  auto start = std::chrono::steady_clock::now();
  torch::inductor::AOTIModelPackageLoader loader(package);
  std::printf("loaded in %.1f ms\n", milliseconds_since(start));
  std::vector<c10::IValue> outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> result = loader.run({inputs[i]});
    synchronize(device);
    double elapsed = milliseconds_since(start);
    outputs.push_back(result.at(0).cpu());
    std::printf("run %zu: %.3f ms\n", i, elapsed);
  }
  // a tuple: torch.load reads it with its default weights_only=True (a list would carry a type tag)
  write_file(outputs_path, torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(outputs))));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s LIBRARY PACKAGE DEVICE INPUTS OUTPUTS\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], argv[2], c10::Device(argv[3]), argv[4], argv[5]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "aoti_runner: %s\n", error.what());
    return 1;
  }
}
