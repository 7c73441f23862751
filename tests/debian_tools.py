"""Command-line tools some tests drive, from Debian's packages, installed when missing.

The README's test command must work on a fresh machine: a test that needs kcat or
docker-compose installs it (the tests run as root there), as the kafkajs tests install kafkajs
with npm. A machine where it cannot be installed fails the test, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def debian_tool(command: str, package: str) -> str:
    """The path of `command`, installing Debian's `package` first if need be."""
    found = shutil.which(command)
    if found is not None:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    output = ""
    for step in (["apt-get", "install", "-y", "-qq", package],
                 ["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600, env=env)
        except OSError as exc:
            pytest.fail(f"{command} is missing and apt-get cannot run here ({exc}): install "
                        f"Debian's {package}")
        output += done.stdout[-1000:] + done.stderr[-1000:]
        found = shutil.which(command)
        if found is not None:
            return found
    pytest.fail(f"{command} is missing and apt-get could not install {package}:\n{output}")
