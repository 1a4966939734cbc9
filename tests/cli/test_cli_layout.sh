#!/usr/bin/env bash
# reorder_storage: packed weights and an accumulator with the output channels innermost (the convolution layout
# whose vector lanes read contiguous output channels) verify at odd sizes, where no tile divides, and so does a program
# temporary stored in another order (the schedule's own copy, with a dynamic batch); --dump ir shows
# the new layout; an illegal use is an error naming the primitive, the stage and the loop. split_storage: B of a
# GEMM packed once per reduction block into panels of 32 columns (BLAS's layout), read with plain strides, on the
# C target and the emulator; the register tiles prefetch their next tile's output lines (lower/prefetch.c), and
# results verify where no tile divides and with a dynamic M (where no prefetch is made).
set -u
. "$(dirname "$0")/common.inc"
CONV=bench/workloads/conv2d_3x3.te
cat > "$T/conv.sched" <<'S'
cache_write Y local
cache_read K local Y.local
reorder_storage K.local ax1 ax2 ax3 ax0
reorder_storage Y.local n y x f
split Y x 6
split Y f 32
reorder Y n y x.o f.o f.i x.i
fuse Y n y
fuse Y n*y x.o
parallel Y n*y*x.o
compute_at Y.local Y f.o
split Y.local f 16
reorder Y.local n y c r s x f.o f.i
unroll Y.local x
unroll Y.local f.o
vectorize Y.local f.i
vectorize K.local ax0
S
for sz in "-D N=1 -D C=5 -D H=9 -D W=11 -D F=4" "-D N=2 -D C=3 -D H=7 -D W=13 -D F=37"; do
  expect 0 "conv, lanes over output channels ($sz)" -- $K run $CONV $sz --target c --schedule "$T/conv.sched"
  has out "verify: ok" "it verifies ($sz)"
done
expect 0 "dump ir" -- $K lower $CONV -D N=1 -D C=5 -D H=9 -D W=11 -D F=4 --target c --schedule "$T/conv.sched" --dump ir
has out "K_local\[\(\(\(\(ax1 \* 36\) \+ \(ax2 \* 12\)\) \+ \(ax3 \* 4\)\) \+ ax0\)\] = K\[" "K.local is C,R,S,F"
printf 'cache_read B local C\nreorder_storage B.local ax1 ax0\nsplit C i 8\ncompute_at B.local C i.o\n' > "$T/mm.sched"
expect 0 "matmul, B packed transposed" -- $K run matmul -D M=33 -D N=20 -D K=17 --target c --schedule "$T/mm.sched"
has out "verify: ok" "it verifies"
printf 'cache_read B local C\nsplit B.local ax0 4\nreorder_storage B.local ax1 ax0\n' > "$T/bad.sched"
expect 1 "reorder_storage after a split" -- $K run matmul -D M=33 -D N=20 -D K=17 --target c --schedule "$T/bad.sched"
has err "reorder_storage: stage B.local: loop ax1: its loops were already transformed" "the error names primitive, stage, loop"
# a program temporary (the padded input) stored batch-innermost: the schedule's own copy of the tensor, with a
# dynamic batch (the symbolic dimension becomes the contiguous one), on the C target and on the CUDA emulator
printf 'reorder_storage P c h w n\n' > "$T/pad.sched"
for t in "--target c" "--emulate"; do
  expect 0 "padded input batch-innermost, dynamic N ($t)" -- $K run conv2d -D N=3 -D C=3 -D H=9 -D W=7 -D F=4 \
    --dynamic N $t --schedule "$T/pad.sched"
  has out "verify: ok" "it verifies ($t)"
done
printf 'reorder_storage Y n y x f\n' > "$T/out.sched"
expect 1 "reorder_storage of an output" -- $K run conv2d -D N=3 -D C=3 -D H=9 -D W=7 -D F=4 --target c \
  --schedule "$T/out.sched"
has err "reorder_storage: stage Y: loop n: it writes a program output" "the error says why"
cat > "$T/blis.sched" <<'S'
split C k 16
split C i 24
split C i.i 8
split C j 32
reorder C k.o i.o j.o i.i.o k.i i.i.i j.i
parallel C i.o
cache_read B local C
split_storage B.local ax1 32
reorder_storage B.local ax1.o ax0 ax1.i
compute_at B.local C k.o
vectorize B.local ax1.i
cache_read A local C
compute_at A.local C i.o
unroll C i.i.i
vectorize C j.i
S
for dyn in "" "--dynamic M"; do
  expect 0 "matmul, B in panels ($dyn)" -- $K run matmul -D M=70 -D N=64 -D K=40 $dyn --target c --schedule "$T/blis.sched"
  has out "verify: ok" "it verifies ($dyn)"
done
expect 0 "dump c" -- $K lower matmul -D M=70 -D N=64 -D K=40 --target c --schedule "$T/blis.sched" --dump c
has out "B_local\[ax1_o \* 512 \+ ax0 \* 32 \+ ax1_i\] = B\[" "B.local is [N/32][K][32], filled in order"
has out "\* B_local\[j_o \* 512 \+ k_i \* 32 \+ j_i\]" "the tile reads a panel with plain strides, no division"
grep -q "B_local\[kg_floor" "$T/out" && { echo "FAIL: a division left in B.local's index"; fail=1; }
has out "kg_prefetch_w\(&C\[" "the register tile prefetches its next tile's output"
expect 0 "dump c, dynamic M" -- $K lower matmul -D M=70 -D N=64 -D K=40 --dynamic M --target c --schedule "$T/blis.sched" --dump c
grep -q "kg_prefetch_w(&C" "$T/out" && { echo "FAIL: a prefetch into an output of dynamic size"; fail=1; }
printf 'cache_read B local C\nsplit_storage B.local ax1 4\nreorder_storage B.local ax1.o ax0 ax1.i\n' > "$T/e.sched"
expect 0 "matmul, B in panels, emulated" -- $K run matmul -D M=33 -D N=20 -D K=17 --emulate --schedule "$T/e.sched"
has out "verify: ok" "it verifies on the emulator"
printf 'cache_read B local C\nsplit_storage B.local ax1 3\n' > "$T/bad.sched"
expect 1 "split_storage, a factor that does not divide" -- $K run matmul -D M=33 -D N=20 -D K=17 --target c --schedule "$T/bad.sched"
has err "split_storage: stage B.local: loop ax1: factor 3 does not divide the extent 20" "the error names primitive, stage, loop"
exit $fail
