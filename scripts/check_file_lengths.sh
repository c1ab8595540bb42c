#!/usr/bin/env bash
# Keeps source files to one sitting: a C/C++/CUDA file outside tests/ and
# examples/ longer than 600 lines must say why in its first 5 lines, with a
# comment containing "longer than 600 lines:" and the reason. Exit 1 naming
# every file that is longer without one, 0 otherwise.
#   scripts/check_file_lengths.sh [ROOT]    (ROOT defaults to the repository)
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
limit=600
status=0
while IFS= read -r -d '' file; do
  lines=$(wc -l <"$root/$file")
  [ "$lines" -le "$limit" ] && continue
  if ! head -n 5 "$root/$file" | grep -qi "longer than $limit lines:"; then
    echo "$file: $lines lines (over $limit) with no 'longer than $limit lines: <why>' in its first 5 lines"
    status=1
  fi
done < <(git -C "$root" ls-files -z -- '*.c' '*.cc' '*.h' '*.cu' '*.cuh' ':!:tests/*' ':!:examples/*')
[ "$status" -eq 0 ] && echo "file lengths: ok (none over $limit lines without a reason)"
exit "$status"
