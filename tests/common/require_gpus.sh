#!/bin/sh
# usage: require_gpus.sh N CCL_INFO COMMAND...
# Runs COMMAND when the nccl backend sees at least N GPUs; otherwise says so
# and exits 77, which the tests that use it declare as ctest's "skipped".
needed=$1
ccl_info=$2
shift 2
visible=$("$ccl_info" --ccl_backend=nccl --device_count 2>/dev/null)
case "$visible" in '' | *[!0-9]*) visible=0 ;; esac
if [ "$visible" -lt "$needed" ]; then
  echo "skipped: needs $needed GPUs, the nccl backend sees $visible"
  exit 77
fi
exec "$@"
