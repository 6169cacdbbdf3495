#!/usr/bin/env bash
# The report pages in a real browser (Debian's chromium, headless): report.html of the
# smoke plan and sweep.html of a small sweep render with no console message (the pages
# carry no script, so any message is a failed resource or a parse error), every chart is
# an SVG of non-zero size, and a screenshot of each lands beside it (report.png,
# sweep.png) for a reviewer to look at.
#
#   bash interop/browser.sh [OUT_DIR]     # or: just browser
# Needs chromium (installed with apt-get as root when missing) and the harness (built).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
SAY_AS=browser
source interop/lib.sh

chrome=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chrome ]]; then
  apt_install chromium
  chrome=$(command -v chromium)
fi
say "$("$chrome" --version 2>/dev/null | head -1)"

cargo build --locked --release --quiet -p fault-server -p harness
harness="${CARGO_TARGET_DIR:-target}/release/harness"
out=${1:-$(mktemp -d)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
"$harness" chaos plans/smoke.yaml --quiet --out "$out/chaos" >/dev/null
"$harness" simulate plans/outage.yaml --quiet --policy jittered-budget \
  --sweep 'jittered-budget.budget.ratio=0.05,0.2' --out "$out/sweep" >/dev/null

headless=("$chrome" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage
  --no-first-run --hide-scrollbars --allow-file-access-from-files)
failed=0
for page in "$out/chaos/report.html" "$out/sweep/sweep.html"; do
  name=$(basename "$page" .html)
  # Any console message of the page itself.
  "${headless[@]}" --enable-logging=stderr --v=0 --virtual-time-budget=5000 \
    --dump-dom "file://$page" >"$out/$name.dom" 2>"$out/$name.log" || true
  if grep -a 'CONSOLE' "$out/$name.log" >&2; then
    say "$name.html: console messages (above)" >&2
    failed=1
  fi
  # Each chart's size as laid out, read through a page that frames it (same origin under
  # --allow-file-access-from-files).
  cat >"$out/$name-sizes.html" <<HTML
<!doctype html><meta charset="utf-8">
<iframe id="f" src="file://$page" style="width:1400px;height:2400px"></iframe>
<pre id="sizes">pending</pre>
<script>
document.getElementById('f').onload = function () {
  var d = this.contentDocument, rows = [];
  d.querySelectorAll('svg').forEach(function (s, i) {
    var r = s.getBoundingClientRect();
    rows.push('svg ' + i + ' ' + Math.round(r.width) + 'x' + Math.round(r.height));
  });
  rows.push('tables ' + d.querySelectorAll('table').length);
  document.getElementById('sizes').textContent = rows.join('\n') || 'none';
};
</script>
HTML
  "${headless[@]}" --virtual-time-budget=5000 --dump-dom "file://$out/$name-sizes.html" \
    >"$out/$name-sizes.dom" 2>/dev/null || true
  sizes=$(sed -n '/<pre id="sizes">/,/<\/pre>/p' "$out/$name-sizes.dom" | sed 's/<[^>]*>//g')
  charts=$(grep -c '^svg ' <<<"$sizes" || true)
  empty=$(grep -E '^svg [0-9]+ (0x|[0-9]+x0$)' <<<"$sizes" || true)
  if [[ $charts -eq 0 || -n $empty ]]; then
    say "$name.html: $charts charts, of zero size: ${empty:-none found}" >&2
    printf '%s\n' "$sizes" >&2
    failed=1
  else
    say "$name.html: $charts charts, each of non-zero size ($(grep -m1 '^svg ' <<<"$sizes" | cut -d' ' -f3) the first), $(grep '^tables' <<<"$sizes" | cut -d' ' -f2) tables, no console message"
  fi
  "${headless[@]}" --screenshot="$(dirname "$page")/$name.png" --window-size=1400,2400 \
    "file://$page" >/dev/null 2>&1 || true
  if [[ -s "$(dirname "$page")/$name.png" ]]; then
    say "screenshot: $(dirname "$page")/$name.png"
  else
    say "$name.html: no screenshot" >&2
    failed=1
  fi
done
exit $failed
