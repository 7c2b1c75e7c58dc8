"""The site's package settings for the image build (container/enroot-build.sh), as `enroot start -e` values.

pip inside the build container reads neither this host's pip configuration nor its CA bundle. What it needs
of them is passed in as NAME=VALUE: the index and mirror (pip's own settings, whose `:env:` scope holds the
PIP_* variables; a file:// index or a local path of this host is left out, the wheels prepared here carry
what it held), the proxy variables, and the CA bundle, which is copied into the build's scratch folder and
named by its path inside the container.

    python3 -m login.pip_settings INSIDE [SCRATCH]     one NAME=VALUE per line on stdout
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

INDEX_SETTINGS = (("PIP_INDEX_URL", "index-url"), ("PIP_EXTRA_INDEX_URL", "extra-index-url"),
                  ("PIP_TRUSTED_HOST", "trusted-host"))
PASSED_AS_THEY_ARE = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                      "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")
CA_NAMES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
CA_FILE = "ca-bundle.pem"
SCOPE_RANK = {":env:": 0, "site": 1, "user": 2, "global": 3}  # pip's precedence, highest first


def parse_pip_config(listing: str) -> dict[str, str]:
    """`pip config list` lines (`scope.key='value'`) -> {key: value}, the highest-ranked scope winning."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.partition(".")
        rank = SCOPE_RANK.get(scope, len(SCOPE_RANK))
        if name and (name not in found or rank < found[name][0]):
            found[name] = (rank, value.strip().strip("'\""))
    return {name: value for name, (_, value) in found.items()}


def settings(config: Mapping[str, str], environ: Mapping[str, str], inside: str,
             is_file: Callable[[str], bool] = os.path.isfile) -> tuple[list[str], str | None]:
    """(NAME=VALUE lines for the build container, the host's CA bundle to copy to INSIDE/ca-bundle.pem)."""
    out = []
    for name, key in INDEX_SETTINGS:
        urls = [u for u in config.get(key, environ.get(name, "")).split() if not u.startswith(("file:", "/"))]
        if urls:
            out.append(f"{name}={' '.join(urls)}")
    out += [f"{name}={environ[name]}" for name in PASSED_AS_THEY_ARE if environ.get(name)]
    candidates = (config.get("cert"), environ.get("SSL_CERT_FILE"), environ.get("REQUESTS_CA_BUNDLE"))
    ca = next((c for c in candidates if c and is_file(c)), None)
    if ca:
        out += [f"{name}={inside}/{CA_FILE}" for name in CA_NAMES]
    return out, ca


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python3 -m login.pip_settings INSIDE [SCRATCH]", file=sys.stderr)
        return 2
    inside, scratch = argv[0], (argv[1] if len(argv) > 1 else "")
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    lines, ca = settings(parse_pip_config(listing), os.environ, inside)
    if ca and scratch:
        shutil.copyfile(ca, Path(scratch) / CA_FILE)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
