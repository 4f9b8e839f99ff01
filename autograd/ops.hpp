// Every autograd op, for users who want them all: #include "autograd/ops.hpp".
#pragma once

#include "autograd/attention.hpp"
#include "autograd/autocast.hpp"
#include "autograd/broadcast.hpp"
#include "autograd/checkpoint.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/index.hpp"
#include "autograd/matmul.hpp"
#include "autograd/norm.hpp"
#include "autograd/random.hpp"
#include "autograd/reduce.hpp"
#include "autograd/rope.hpp"
#include "autograd/shape.hpp"
#include "autograd/softmax.hpp"
#include "autograd/swiglu.hpp"
#include "autograd/tensor.hpp"
