# ctest driver: install xgrad from the build tree into a scratch prefix, then configure,
# build and run tests/consumer against it with find_package(xgrad).
set(prefix ${BINARY_DIR}/consumer-test/prefix)
set(build ${BINARY_DIR}/consumer-test/build)
file(REMOVE_RECURSE ${BINARY_DIR}/consumer-test)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer test: installing failed (${rc})")
endif()
# One consumer per layer, each finding only its component and linking only its target, then the
# whole package. A layer's program names none of the libraries above it: core's, io's and nn's
# need no ICU, PCRE2 or MPI, and nothing below distributed needs MPI.
set(not_needed_core "icu|pcre2|mpi")
set(not_needed_io "icu|pcre2|mpi")
set(not_needed_nn "icu|pcre2|mpi")
set(not_needed_text "mpi")
set(not_needed_train "mpi")
foreach(layer core io nn text train distributed xgrad)
  set(dir ${build}-${layer})
  foreach(step
      "${CMAKE_COMMAND};-S;${SOURCE_DIR}/tests/consumer;-B;${dir};-DLAYER=${layer};-DCMAKE_PREFIX_PATH=${prefix};-DCMAKE_BUILD_TYPE=Release"
      "${CMAKE_COMMAND};--build;${dir}"
      "${dir}/consumer")
    execute_process(COMMAND ${step} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "consumer test (${layer}): step failed (${rc}): ${step}")
    endif()
  endforeach()
  if(DEFINED not_needed_${layer})
    execute_process(COMMAND readelf -d ${dir}/consumer OUTPUT_VARIABLE needed RESULT_VARIABLE rc)
    string(REGEX MATCHALL "Shared library: \\[[^]]*(${not_needed_${layer}})[^]]*\\]" extra "${needed}")
    if(NOT rc EQUAL 0 OR extra)
      message(FATAL_ERROR "consumer test (${layer}): the program links what its layer does not use: ${extra}")
    endif()
  endif()
endforeach()
set(build ${build}-xgrad)
# No header the sources call internal is installed (install() leaves out detail/ folders; an
# internal header outside one would be installed and become part of the package's surface).
file(GLOB_RECURSE installed_headers ${prefix}/include/xgrad/*.hpp)
foreach(h ${installed_headers})
  file(STRINGS ${h} head LIMIT_COUNT 3)
  string(TOLOWER "${head}" head)
  if(head MATCHES "internal to")
    message(FATAL_ERROR "consumer test: ${h} is installed but says it is internal (move it under a detail/ folder)")
  endif()
endforeach()
# The installed package links libxgrad_wait_policy.so so that libgomp reads xgrad's default
# wait policy (a short spin: a spin count of 10000, which libgomp's verbose report shows).
execute_process(
  COMMAND env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u XGRAD_DEFAULT_WAIT_POLICY -u OMP_NUM_THREADS OMP_DISPLAY_ENV=verbose ${build}/consumer
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer test: the consumer failed (${rc}): ${err}")
endif()
if(NOT err MATCHES "GOMP_SPINCOUNT = '10000'")
  message(FATAL_ERROR "consumer test: libgomp did not read xgrad's default short spin:\n${err}")
endif()
