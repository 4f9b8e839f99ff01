# install() rules and an exported CMake package: a separate project does
#   find_package(xgrad REQUIRED)   target_link_libraries(app PRIVATE xgrad::xgrad)
# or links only the layers it uses (xgrad::core, xgrad::io, xgrad::nn, xgrad::text, xgrad::train,
# xgrad::distributed): a program of tensors alone needs neither MPI nor ICU nor PCRE2.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS xgrad xgrad_core xgrad_io xgrad_nn xgrad_text xgrad_train xgrad_distributed xgrad_wait_policy
  EXPORT xgradTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES xgrad.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/xgrad)
# Headers under any detail/ folder are internal to the library's .cpp files and stay out.
install(DIRECTORY autograd io nn text losses optim finetune distributed DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/xgrad
  FILES_MATCHING PATTERN "*.hpp" PATTERN "detail" EXCLUDE)
install(EXPORT xgradTargets NAMESPACE xgrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xgrad)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/xgradConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/xgradConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xgrad)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/xgradConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/xgradConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/xgradConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xgrad)
