// xgrad::io alone: a safetensors file written and read back.
#include <cstdio>
#include <filesystem>

#include "io/safetensors.hpp"

int main() {
  const std::string path = (std::filesystem::temp_directory_path() / "xgrad-consumer-io.safetensors").string();
  xg::io::save_safetensors(path, {{"w", xg::tensor({1.5, -2.0})}});
  const xg::TensorMap back = xg::io::load_safetensors(path);
  std::filesystem::remove(path);
  const bool ok = back.at("w").to_vector() == std::vector<double>{1.5, -2.0};
  std::printf("consumer io: safetensors round trip %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
