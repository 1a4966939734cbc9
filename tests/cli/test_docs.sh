#!/usr/bin/env bash
# The documentation's shape: README.md stays a front page (at most 200 lines; the manual is docs/), and every
# relative markdown link in README.md, docs/*.md and bench/results/README.md points to a file or folder that
# exists, with its #anchor, when it names one in a markdown file, matching a heading there. Links inside code
# (fenced blocks, `spans`) are not links. docs/install.md is written separately: a link to it is only reported
# while it is missing, and checked like any other once it exists.
set -u
. "$(dirname "$0")/common.inc"
MAX_README_LINES=200

n=$(wc -l < README.md)
if [ "$n" -gt $MAX_README_LINES ]; then
  echo "FAIL: README.md has $n lines, at most $MAX_README_LINES (the manual belongs in docs/)"; fail=1
fi

# The links of a markdown file, one target a line, code left out.
links() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^)]*\)/)) {
        t = substr(line, RSTART + 2, RLENGTH - 3)
        sub(/^[ \t]*</, "", t); sub(/>.*$/, "", t); sub(/[ \t].*$/, "", t)
        print t
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

# The anchors GitHub gives a markdown file's headings: lower case, punctuation dropped, spaces to hyphens.
anchors() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    !fence && /^#+ / {
      h = $0; sub(/^#+ +/, "", h); sub(/ +#* *$/, "", h)
      gsub(/`/, "", h); h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
      print h
    }' "$1"
}

files="README.md bench/results/README.md"
for f in docs/*.md; do [ -e "$f" ] && files="$files $f"; done
checked=0
for f in $files; do
  if [ ! -f "$f" ]; then echo "FAIL: $f is missing"; fail=1; continue; fi
  dir=$(dirname "$f")
  while IFS= read -r link; do
    case "$link" in
      '' | http://* | https://* | mailto:*) continue ;;
    esac
    path=${link%%#*}; anchor=
    case "$link" in *'#'*) anchor=${link#*#} ;; esac
    target=$f
    [ -n "$path" ] && target=$dir/$path
    checked=$((checked + 1))
    if [ ! -e "$target" ]; then
      case "$target" in
        docs/install.md | ./docs/install.md | docs/./install.md)
          echo "skip: $f links to docs/install.md, not written yet"; continue ;;
      esac
      echo "FAIL: $f: link ($link) points to a missing file: $target"; fail=1; continue
    fi
    if [ -n "$anchor" ] && [ -f "$target" ] && [ "${target%.md}" != "$target" ]; then
      anchors "$target" | grep -qxF -- "$anchor" ||
        { echo "FAIL: $f: link ($link): no heading in $target gives the anchor #$anchor"; fail=1; }
    fi
  done < <(links "$f")
done
[ $checked -gt 0 ] || { echo "FAIL: no relative link found (is the link reader broken?)"; fail=1; }
[ $fail -ne 0 ] || echo "README.md: $n lines; $checked relative links checked"
exit $fail
