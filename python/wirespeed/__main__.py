"""``python -m wirespeed``: runs the wirespeed server installed with the package."""

import os
import shutil
import sys
import sysconfig


def find_wirespeed() -> str:
    """The path of the ``wirespeed`` binary installed with this package."""
    name = "wirespeed" + (sysconfig.get_config_var("EXE") or "")
    for scheme in (None, f"{os.name}_user"):
        scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        path = os.path.join(scripts, name)
        if os.path.isfile(path):
            return path
    found = shutil.which("wirespeed")
    if found:
        return found
    raise FileNotFoundError("the wirespeed binary is not installed beside this package")


def main() -> None:
    binary = find_wirespeed()
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
