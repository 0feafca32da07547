#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (tests/test_browser.py, tests/test_report.py).
# Idempotent: quiet and instant when /usr/bin/chromium is already there. Playwright's own browser
# download is not used (it cannot reach its CDN here); the tests drive this Chromium instead.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
echo "browser_setup: installing Debian chromium (one time, a minute or two)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version >&2
