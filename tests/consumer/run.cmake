# ctest driver: install xgrad from the build tree into a scratch prefix, then configure,
# build and run tests/consumer against it with find_package(xgrad).
set(prefix ${BINARY_DIR}/consumer-test/prefix)
set(build ${BINARY_DIR}/consumer-test/build)
file(REMOVE_RECURSE ${BINARY_DIR}/consumer-test)
foreach(step
    "${CMAKE_COMMAND};--install;${BINARY_DIR};--prefix;${prefix}"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR}/tests/consumer;-B;${build};-DCMAKE_PREFIX_PATH=${prefix};-DCMAKE_BUILD_TYPE=Release"
    "${CMAKE_COMMAND};--build;${build}")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: step failed (${rc}): ${step}")
  endif()
endforeach()
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
