#!/usr/bin/env bash
# Checks the arrows between layers (docs/architecture.md) over #include
# lines: each folder may include only the layers named for it, and only
# ccl_backends/ (and the GPU example) a vendor header. Exit 1 naming every
# include that crosses a line, 0 when none does.
#   scripts/check_layers.sh [ROOT]    (ROOT defaults to the repository)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

# folder: the infini/<layer>/ headers it may include ("data" is dataloader/'s).
# The never-arrows this encodes: ccl/ never rendezvous/ (or anything above
# it), launch/ never ccl/ or parallel/, parallel/ never launch/, dataloader/
# nothing but common/.
rules=(
  "common:common"
  "rendezvous:rendezvous common"
  "ccl:ccl common"
  "dataloader:data common"
  "launch:launch rendezvous common"
  "parallel:parallel ccl rendezvous common"
  "conformance:conformance parallel ccl rendezvous common"
  "bench:bench conformance parallel ccl rendezvous common"
  "ccl_backends:ccl rendezvous common"
)
vendor='#include *[<"](nccl|rccl|hccl|cncl|bkcl|mccl|oneapi/ccl|cuda|cuda_runtime|cuda_runtime_api|cublas|cublasLt|gloo/)[^>"]*[>"]'

crossings=0
for rule in "${rules[@]}"; do
  folder=${rule%%:*}
  allowed=" ${rule#*:} "
  [[ -d "$root/$folder" ]] || continue
  while IFS=: read -r file line text; do
    layer=$(sed -E 's/.*infini\/([a-z_]+)\/.*/\1/' <<<"$text")
    if [[ "$allowed" != *" $layer "* ]]; then
      echo "check_layers: ${file#"$root"/}:$line includes infini/$layer/, which $folder/ may not (it may include:${allowed% })"
      crossings=$((crossings + 1))
    fi
  done < <(grep -rnE --include='*.cc' --include='*.h' --include='*.cu' --include='*.cuh' \
             '#include *[<"]infini/[a-z_]+/' "$root/$folder" || true)
  if [[ "$folder" != ccl_backends ]]; then
    while IFS= read -r hit; do
      echo "check_layers: ${hit#"$root"/} is a vendor header outside ccl_backends/"
      crossings=$((crossings + 1))
    done < <(grep -rnE --include='*.cc' --include='*.h' "$vendor" "$root/$folder" || true)
  fi
done
# launch/diagnostics/ sits below the rest of the launcher (launch/CMakeLists.txt):
# of infini/launch/ it includes its own headers and options.h (the errors) only.
diagnostics="$root/launch/diagnostics"
if [[ -d "$diagnostics" ]]; then
  own=" options.h $(cd "$diagnostics/include/infini/launch" && echo *.h) "
  while IFS=: read -r file line text; do
    header=$(sed -E 's/.*infini\/launch\/([^">]+)[">].*/\1/' <<<"$text")
    if [[ "$own" != *" $header "* ]]; then
      echo "check_layers: ${file#"$root"/}:$line includes infini/launch/$header, which launch/diagnostics/ may not (it may include its own headers and options.h)"
      crossings=$((crossings + 1))
    fi
  done < <(grep -rnE --include='*.cc' --include='*.h' '#include *[<"]infini/launch/' "$diagnostics" || true)
fi
if [[ $crossings -ne 0 ]]; then
  echo "check_layers: $crossings include(s) cross a layer's line (docs/architecture.md)" >&2
  exit 1
fi
echo "layers: ok"
