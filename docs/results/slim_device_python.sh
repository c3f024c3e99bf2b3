#!/usr/bin/env bash
# Repack the bundles of ../shared/device-pythons/build.sh so that four fit in one device call (the working
# tree plus what is carried must stay under 64 MiB): without NumPy (no workload of the study imports it;
# torch warns once "Failed to initialize NumPy"), the shared libraries stripped of their symbol tables
# (strip --strip-unneeded: code and dynamic symbols kept, so the interpreter and torch run the same
# instructions), pydoc's topic data, C headers, the test
# extension modules, sqlite3, curses and the CJK codecs left out (no workload uses them), xz -9e. ~30 MB -> ~9 MB
# a version.
#   docs/results/slim_device_python.sh .dev/pythons .dev/slim
# setup_on_device.sh reads the result unchanged (an empty numpy/ folder is copied as nothing).
set -eu
IN=$1; OUT=$2; mkdir -p "$OUT"
for f in "$IN"/py-*.tar.xz; do
  S=$(mktemp -d)
  tar -C "$S" -xJf "$f"
  rm -rf "$S"/numpy && mkdir -p "$S"/numpy
  V=$(echo "$S"/root/.pyenv/versions/*)
  rm -rf "$V"/include "$V"/share "$V"/lib/python3.*/pydoc_data "$V"/lib/python3.*/config-3.* \
      "$V"/lib/python3.*/sqlite3 "$V"/lib/python3.*/curses
  rm -f "$V"/lib/python3.*/lib-dynload/_test* "$V"/lib/python3.*/lib-dynload/_ctypes_test* \
      "$V"/lib/python3.*/lib-dynload/xxlimited* "$V"/lib/python3.*/lib-dynload/_xx* \
      "$V"/lib/python3.*/lib-dynload/_codecs_{cn,hk,jp,kr,tw,iso2022}* "$V"/lib/python3.*/lib-dynload/_sqlite3* \
      "$V"/lib/python3.*/lib-dynload/_curses* "$V"/lib/python3.*/lib-dynload/_tkinter*
  find "$S" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
  tar -C "$S" -cf - root torchpy numpy | xz -T2 -9e > "$OUT/$(basename "$f").tmp"
  mv "$OUT/$(basename "$f").tmp" "$OUT/$(basename "$f")"
  rm -rf "$S"
  ls -la "$OUT/$(basename "$f")"
done
