#!/usr/bin/env bash
# reorder_storage: packed weights and an accumulator with the output channels innermost (the convolution layout
# whose vector lanes read contiguous output channels) verify at odd sizes, where no tile divides, and so does a program
# temporary stored in another order (the schedule's own copy, with a dynamic batch); --dump ir shows
# the new layout; an illegal use is an error naming the primitive, the stage and the loop.
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
exit $fail
