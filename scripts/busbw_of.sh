# Sourced by the GPU scripts: busbw (GB/s) at one size from a log.
# ccl_busbw LOG BYTES: rank 0's row of a ccl_bench log (column 8);
# torch_busbw LOG BYTES: scripts/torch_gloo_cuda_bench.py's row (column 4).
# Each prints "-" where the log has no such row.
ccl_busbw() {
  awk -v b="$2" '/^\[rank0\]:/ { sub(/^\[rank0\]:/, ""); if ($1 == b) v = $8 }
                 END { print (v == "" ? "-" : v) }' "$1" 2>/dev/null || echo -
}
torch_busbw() {
  awk -v b="$2" '$1 == b { v = $4 } END { print (v == "" ? "-" : v) }' "$1" 2>/dev/null || echo -
}
