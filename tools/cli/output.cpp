// The executables' output plumbing (see output.hpp): mkdir -p, file writing, printf formatting,
// the git revision (XGRAD_GIT_REVISION, defined for this file by tools/cli/CMakeLists.txt).
#include "tools/cli/output.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "autograd/gemm_backend.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"

#ifndef XGRAD_GIT_REVISION
#define XGRAD_GIT_REVISION "unknown"
#endif

namespace xg::cli {

void make_dir(const std::string& dir) {
  std::string path;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    path += part + "/";
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create output folder " + path);
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << text;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const char* git_revision() { return XGRAD_GIT_REVISION; }

nlohmann::json settings_json() {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : settings().table()) j[name] = value;
  j["gemm backend"] = gemm_backend_description();
  j["own kernels"] = build_kernels_description();
  j["thread policy"] = threads_description();
  return j;
}

nlohmann::json experiment_json(const std::string& prog, const std::string& part, uint64_t seed,
                               const nlohmann::json& flags) {
  return nlohmann::json{
      {"experiment", prog + " " + part}, {"git_revision", git_revision()}, {"gemm", gemm_backend_description()},
      {"seed", seed}, {"flags", flags}, {"settings", settings_json()}};
}

void report_plot(const std::string& dir, const std::string& stem, bool ok, const std::string& why, bool& warned) {
  if (ok) {
    std::cout << "wrote " << dir << "/" << stem << ".png and .svg\n";
  } else if (!warned) {
    std::cout << "no plot: " << why << "\n";
    warned = true;
  }
}

}  // namespace xg::cli
