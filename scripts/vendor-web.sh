#!/usr/bin/env bash
# Vendors the browser page's libraries into internal/web/static/vendor/ (committed, so that
# `go build` needs no npm). Needs npm and the npm registry; run it after changing a version
# below, then check the page in a browser and commit the result.
#
# Each package is fetched with `npm pack` at its pinned version (npm checks the registry's
# integrity hash), and only the files the page loads are copied, with the package's licence.
# vendor/VERSIONS lists package, version, file, sha256 and licence of every copied file.
set -euo pipefail
cd "$(dirname "$0")/.."

# package@version: the pins. htm's preact/standalone bundles Preact 10, its hooks and htm.
HTM=htm@3.1.1
PREACT=preact@10.29.8 # only its LICENSE: the Preact inside htm's standalone bundle is MIT
MARKED=marked@18.2.1
DOMPURIFY=dompurify@3.4.18
HLJS=@highlightjs/cdn-assets@11.12.0

out=internal/web/static/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# unpack PKG@VERSION: npm pack it into $tmp and extract it to $tmp/<name>/.
unpack() {
	local spec=$1 name=${1%@*} tgz
	tgz=$(cd "$tmp" && npm pack --silent "$spec" | tail -n 1)
	mkdir -p "$tmp/$name"
	tar -xzf "$tmp/$tgz" -C "$tmp/$name" --strip-components=1
}

for spec in "$HTM" "$PREACT" "$MARKED" "$DOMPURIFY" "$HLJS"; do
	unpack "$spec"
done

rm -rf "$out"
mkdir -p "$out"
versions=$out/VERSIONS
printf '# package\tversion\tfile\tsha256\tlicence (written by scripts/vendor-web.sh)\n' >"$versions"

# take SPEC SRC DEST LICENCE: copy $tmp/<name>/SRC to $out/DEST and list it.
take() {
	local spec=$1 src=$2 dest=$3 licence=$4 name=${1%@*} version=${1##*@}
	cp "$tmp/$name/$src" "$out/$dest"
	printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$version" "$dest" \
		"$(sha256sum "$out/$dest" | cut -d' ' -f1)" "$licence" >>"$versions"
}

take "$HTM" preact/standalone.module.js preact-htm.js 'Apache-2.0 (htm); MIT (the Preact it bundles)'
take "$HTM" LICENSE LICENSE.htm Apache-2.0
take "$PREACT" LICENSE LICENSE.preact MIT
take "$MARKED" lib/marked.esm.js marked.js MIT
take "$MARKED" LICENSE LICENSE.marked MIT
take "$DOMPURIFY" dist/purify.es.mjs purify.js 'MPL-2.0 OR Apache-2.0'
take "$DOMPURIFY" LICENSE LICENSE.dompurify 'MPL-2.0 OR Apache-2.0'
take "$HLJS" es/core.min.js highlight.js BSD-3-Clause
take "$HLJS" es/languages/python.min.js highlight-python.js BSD-3-Clause
take "$HLJS" es/languages/bash.min.js highlight-bash.js BSD-3-Clause
take "$HLJS" styles/github.min.css highlight-light.css BSD-3-Clause
take "$HLJS" styles/github-dark.min.css highlight-dark.css BSD-3-Clause
take "$HLJS" LICENSE LICENSE.highlightjs BSD-3-Clause

du -cb "$out"/* | tail -n 1 | awk '{printf "vendored %d bytes into '"$out"'\n", $1}'
