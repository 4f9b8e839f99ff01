// A layer-check probe (tests/layers/CMakeLists.txt): compiled with one layer's include roots,
// it includes XGRAD_PROBE_HEADER, a header of that layer (must compile) or of a layer above it
// (must fail: "No such file or directory").
#include XGRAD_PROBE_HEADER
