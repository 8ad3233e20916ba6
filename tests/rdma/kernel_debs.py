"""Downloads the packages of a suite's newest amd64 kernel (the metapackage
linux-image-amd64 and every linux-*-VERSION package it pulls in) into a folder, and
prints VERSION (as /lib/modules names it). Used by build_image.sh: the guest's kernel
comes from another suite than its root, so apt cannot install it there.

    python3 kernel_debs.py MIRROR SUITE FOLDER
"""

import lzma
import os
import re
import sys
import urllib.request


def stanzas(text: str) -> dict[str, dict[str, str]]:
    found = {}
    for block in text.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", block, re.M))
        if "Package" in fields:
            found[fields["Package"]] = fields
    return found


def names(depends: str) -> list[str]:
    return [alternative.split()[0] for part in depends.split(",") for alternative in part.split("|")
            if alternative.strip()]


def main(mirror: str, suite: str, folder: str) -> None:
    with urllib.request.urlopen(f"{mirror}/dists/{suite}/main/binary-amd64/Packages.xz", timeout=120) as reply:
        packages = stanzas(lzma.decompress(reply.read()).decode())
    meta = packages["linux-image-amd64"]
    image = next(n for n in names(meta["Depends"]) if n.startswith("linux-image-") and n in packages)
    version = image.removeprefix("linux-image-")
    wanted, todo = set(), [image]
    while todo:  # the image and its own parts (linux-binary-, linux-modules-, linux-base-VERSION)
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        todo += [n for n in names(packages[name].get("Depends", "")) if n.endswith(f"-{version}") and n in packages]
    os.makedirs(folder, exist_ok=True)
    for name in sorted(wanted):
        filename = packages[name]["Filename"]
        urllib.request.urlretrieve(f"{mirror}/{filename}", os.path.join(folder, os.path.basename(filename)))
    print(version)


if __name__ == "__main__":
    main(*sys.argv[1:])
