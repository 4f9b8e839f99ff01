// xgrad: everything in one include.
#pragma once

#include "autograd/gradcheck.hpp"
#include "autograd/ops.hpp"
#include "autograd/safetensors.hpp"
#include "autograd/xarray.hpp"
#include "losses/losses.hpp"
#include "nn/attention.hpp"
#include "nn/block.hpp"
#include "nn/decoder.hpp"
#include "nn/ffn.hpp"
#include "nn/init.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"
#include "nn/norm.hpp"
#include "nn/position.hpp"
#include "nn/sampling.hpp"
#include "optim/optim.hpp"
