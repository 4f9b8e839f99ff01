# xgrad_layer(): one static library per layer of the tree (docs/design.md, "Layers"), whose
# arrows (the layers it may use) are its target_link_libraries.
#
# The compiler enforces the arrows: a layer's sources see only the include roots of the layers
# it links. Each layer's root is a folder of the build tree, <build>/include/<layer>/, that
# holds a link to each of the layer's source folders and nothing else; the repository root is
# never an include folder of a library. So `#include "finetune/train_loop.hpp"` in nn/ is a
# "No such file" error at compile time, not a convention (tests/layers checks that it is).
# Installed, every layer's headers go under include/xgrad/, as before.
include_guard(GLOBAL)

function(xgrad_layer name)
  cmake_parse_arguments(L "" "" "FOLDERS;PUBLIC;PRIVATE" ${ARGN})
  set(target xgrad_${name})
  add_library(${target} STATIC)
  add_library(xgrad::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  set(root ${PROJECT_BINARY_DIR}/include/${name})
  file(MAKE_DIRECTORY ${root})
  foreach(folder IN LISTS L_FOLDERS)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${root}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/xgrad>)
  target_link_libraries(${target} PUBLIC ${L_PUBLIC} PRIVATE ${L_PRIVATE})
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(XGRAD_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
    # So that build_kernels_description() says how the instruction set below was chosen.
    target_compile_definitions(${target} PRIVATE XGRAD_MARCH_NATIVE=1)
  endif()
  # Eight sources per compiler run: the templates they share (nlohmann::json's, the STL's,
  # xsimd's) are instantiated and optimised once per batch rather than per file, which took the
  # libraries from 204 to 132 s of CPU (bench/README.md, "Build time"). So a source file must not
  # define a file-scope name that another file of its layer defines.
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
endfunction()
