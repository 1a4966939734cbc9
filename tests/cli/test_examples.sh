#!/usr/bin/env bash
# examples/kernels/check_c.c (built by the Makefile against the headers `make kernels` exported from the committed
# logs) runs every exported kernel of its workloads on random data and checks it against plain C loops.
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
[ -x "$B/examples/check_c" ] || { echo "FAIL: $B/examples/check_c is not built (make test builds it)"; exit 1; }
expect 0 "the C example" -- "$B/examples/check_c"
has out "matmul M=1024 K=1024 N=1024 +ok" "matmul, first binding"
has out "matmul M=512 K=512 N=512 +ok" "matmul, second binding"
has out "softmax N=4096 D=1024 +ok" "softmax"
has out "layernorm N=4096 D=1024 +ok" "layernorm"
has out "bias_gelu_residual N=4096 D=4096 +ok" "bias_gelu_residual"
has out "conv2d_3x3 N=1 C=64 H=56 W=56 F=64 +ok" "conv2d_3x3"
has out "attention B=16 S=512 D=64 T=512 E=64 +ok" "attention"
has out "all kernels match" "the example passes"
exit $fail
