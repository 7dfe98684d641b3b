#!/usr/bin/env bash
# scripts/build-front.sh: build the console's hydrated wasm bundle into $SECKILL_SITE_ROOT.
#
# Why by hand (no cargo-leptos): the `app` crate's `hydrate` lib is compiled with Debian's
# rustc-web 1.96 (rustup toolchain `debian-web`, linked by setup.sh) because `rustup target add
# wasm32-unknown-unknown` cannot download here; its std is rebuilt from rust-web-src
# (-Zbuild-std, allowed by RUSTC_BOOTSTRAP=1). Then wasm-bindgen (exactly Cargo.lock's version)
# makes the JS glue, npm binaryen's wasm-opt shrinks the module (never Debian's binaryen 108: it
# breaks hydration), and the CSS and public assets are copied next to it.
#
# Output ($SECKILL_SITE_ROOT, default $CARGO_TARGET_DIR/site):
#   pkg/seckill_console.js, pkg/seckill_console_bg.wasm, pkg/seckill_console.wasm (same file: the
#   name Leptos asks for when LEPTOS_OUTPUT_NAME is set at compile time), pkg/seckill_console.css,
#   and public/* at the top. Set SECKILL_SKIP_WASM_OPT=1 to skip wasm-opt.
#   The names browsers load: pkg/seckill_console.HASH.{js,wasm,css}, each HASH the start of the
#   file's SHA-256, beside its brotli (.br) and gzip (.gz) copies, and pkg/hash.txt saying which
#   HASH each kind has now (the server reads it, names the files in its pages and lets browsers
#   keep them for a year: a new build is a new name). The previous build's files are kept, so a
#   page rendered by an instance not yet restarted still finds its bundle.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"

name="$LEPTOS_OUTPUT_NAME"
# One front build folder per checkout: server functions are addressed by a hash that depends on
# where the source was compiled, so a bundle built in another clone (sharing the cache) would
# call routes this checkout's server does not have, and cargo would take that clone's
# uplifted app.wasm for its own when both clones hold the same sources.
front_dir="$CARGO_TARGET_DIR/front-$(printf %s "$SECKILL_ROOT" | sha256sum | cut -c1-12)"
pkg="$SECKILL_SITE_ROOT/$LEPTOS_SITE_PKG_DIR"
wasm_in="$front_dir/wasm32-unknown-unknown/wasm-release/app.wasm"

command -v wasm-bindgen >/dev/null || die "wasm-bindgen not found: run scripts/setup.sh first"

log "front: cargo build -p app (hydrate, wasm32, toolchain debian-web)"
t0=$(now_s)
RUSTUP_TOOLCHAIN=debian-web RUSTC_BOOTSTRAP=1 cargo build --quiet -p app --lib \
  --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort \
  --no-default-features --features hydrate --profile wasm-release --target-dir "$front_dir"
[[ -f "$wasm_in" ]] || die "expected $wasm_in after the build"
log "front: wasm compiled in $(($(now_s) - t0))s ($(stat -c %s "$wasm_in") bytes)"

# Skip wasm-bindgen/wasm-opt when neither the module nor the tools changed since the last run.
skip_opt="${SECKILL_SKIP_WASM_OPT:-0}"
stamp="$pkg/.build-stamp"
opt_version=skip
if [[ "$skip_opt" != 1 ]]; then
  [[ "$(command -v wasm-opt || true)" == "$SECKILL_TOOLS_DIR/bin/wasm-opt" ]] \
    || die "wasm-opt on PATH is '$(command -v wasm-opt || true)', expected npm binaryen's in $SECKILL_TOOLS_DIR/bin (run scripts/setup.sh)"
  opt_version="$(wasm-opt --version)"
fi
want_stamp="$(sha256sum "$wasm_in" | cut -d' ' -f1) $(wasm-bindgen --version) wasm-opt=$opt_version"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" && -f "$pkg/${name}_bg.wasm" && -f "$pkg/$name.js" ]]; then
  log "front: bindings and wasm-opt output up to date"
else
  log "front: wasm-bindgen --target web -> $pkg"
  mkdir -p "$pkg"
  rm -f "$stamp"
  wasm-bindgen --target web --out-dir "$pkg" --out-name "$name" "$wasm_in"
  if [[ "$skip_opt" == 1 ]]; then
    log "front: SECKILL_SKIP_WASM_OPT=1, not running wasm-opt"
  else
    before=$(stat -c %s "$pkg/${name}_bg.wasm")
    t0=$(now_s)
    wasm-opt -Oz -o "$pkg/${name}_bg.wasm.opt" "$pkg/${name}_bg.wasm"
    mv "$pkg/${name}_bg.wasm.opt" "$pkg/${name}_bg.wasm"
    log "front: wasm-opt -Oz ${before} -> $(stat -c %s "$pkg/${name}_bg.wasm") bytes in $(($(now_s) - t0))s"
  fi
  ln -f "$pkg/${name}_bg.wasm" "$pkg/$name.wasm"
  echo "$want_stamp" >"$stamp"
fi

log "front: copying style/main.css and public/ into $SECKILL_SITE_ROOT"
cp style/main.css "$pkg/$name.css"
if [[ -d public ]] && [[ -n "$(ls -A public)" ]]; then
  cp -R public/. "$SECKILL_SITE_ROOT/"
fi

# Content-hashed copies, compressed once here so the server never compresses per request.
log "front: hashed and precompressed copies (brotli, gzip)"
hash_of() { sha256sum "$1" | cut -c1-16; }
js_hash=$(hash_of "$pkg/$name.js")
wasm_hash=$(hash_of "$pkg/${name}_bg.wasm")
css_hash=$(hash_of "$pkg/$name.css")
previous=""
[[ -f "$pkg/hash.txt" ]] && previous="$(cat "$pkg/hash.txt")"
for kind_source in "js:$js_hash:$pkg/$name.js" "wasm:$wasm_hash:$pkg/${name}_bg.wasm" "css:$css_hash:$pkg/$name.css"; do
  IFS=: read -r kind hash source <<<"$kind_source"
  target="$pkg/$name.$hash.$kind"
  if [[ ! -f "$target.br" || ! -f "$target.gz" ]]; then
    cp "$source" "$target"
    # Node (already needed by the browser tests) has brotli built in; Debian's `brotli` may be absent.
    node -e 'const fs=require("fs"),z=require("zlib"),f=process.argv[1],b=fs.readFileSync(f);
      fs.writeFileSync(f+".br",z.brotliCompressSync(b,{params:{[z.constants.BROTLI_PARAM_QUALITY]:11,[z.constants.BROTLI_PARAM_SIZE_HINT]:b.length}}));
      fs.writeFileSync(f+".gz",z.gzipSync(b,{level:9}));' "$target"
  fi
  log "front: $kind $(stat -c %s "$target") bytes, brotli $(stat -c %s "$target.br"), gzip $(stat -c %s "$target.gz")"
done
printf 'js: %s\nwasm: %s\ncss: %s\n' "$js_hash" "$wasm_hash" "$css_hash" >"$pkg/hash.txt.new"
mv "$pkg/hash.txt.new" "$pkg/hash.txt"
if [[ -n "$previous" && "$previous" != "$(cat "$pkg/hash.txt")" ]]; then
  printf '%s\n' "$previous" >"$pkg/hash.previous.txt"
fi
# Hashed files of neither the current nor the previous build go.
kept_lists=("$pkg/hash.txt")
[[ -f "$pkg/hash.previous.txt" ]] && kept_lists+=("$pkg/hash.previous.txt")
keep="$(sed -n 's/^[a-z]*: *//p' "${kept_lists[@]}")"
for file in "$pkg/$name".*.*; do
  [[ -e "$file" ]] || continue
  hash="${file#"$pkg/$name."}"; hash="${hash%%.*}"
  [[ "$hash" =~ ^[0-9a-f]{16}$ ]] || continue
  grep -qx "$hash" <<<"$keep" || rm -f "$file"
done
