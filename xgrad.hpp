// xgrad: everything in one include.
#pragma once

#include "autograd/gradcheck.hpp"
#include "autograd/ops.hpp"
#include "autograd/safetensors.hpp"
#include "autograd/xarray.hpp"
