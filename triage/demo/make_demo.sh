#!/usr/bin/env bash
# Regenerates the demo captures in this folder: two small nsys reports of tests/programs/nvtx_steps.c
# ("before": forward 300 us, "after": forward 200 us; backward twice forward; 20 steps each) and
# their SQLite exports. Needs gcc, nsys and the nvidia-nvtx wheel (pip install nvidia-nvtx); no GPU.
#
# Everything runs under `env -i` with a minimal environment, so that the committed reports do
# not embed the environment of whoever regenerates them. (nsys 2022.4 also stores the environment
# blocks of the other processes it can see on the host: regenerate on a machine where those hold
# nothing private.)
set -euo pipefail
if [ -z "${TRIAGE_DEMO_CLEAN_ENV:-}" ]; then  # start over with only what the tools need
    exec env -i TRIAGE_DEMO_CLEAN_ENV=1 PATH="$PATH" HOME="${HOME:-/tmp}" LANG=C.UTF-8 \
        NSYS="${NSYS:-nsys}" PYTHON="${PYTHON:-python3}" bash "$0" "$@"
fi

here="$(cd "$(dirname "$0")" && pwd)"
source_file="$here/../../tests/programs/nvtx_steps.c"
nsys="${NSYS:-nsys}"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

include="$("$python" - <<'PY'
import pathlib, sysconfig
purelib = pathlib.Path(sysconfig.get_paths()["purelib"])
print(next(p for p in sorted(purelib.glob("nvidia/*/include")) if (p / "nvtx3/nvToolsExt.h").is_file()))
PY
)"
gcc -O2 -I"$include" -o "$work/nvtx_steps" "$source_file" -ldl

capture() {  # name forward_us
    (cd "$work" && env -i PATH=/usr/bin:/bin HOME="$work" LANG=C.UTF-8 \
        "$(command -v "$nsys")" profile --trace=nvtx,osrt --sample=none --cpuctxsw=none \
        -o "$1" --force-overwrite true ./nvtx_steps 20 "$2" >/dev/null)
    "$nsys" export --type sqlite --quiet true --force-overwrite true --output "$work/$1.sqlite" \
        "$work/$1.nsys-rep" >/dev/null
    cp "$work/$1.nsys-rep" "$work/$1.sqlite" "$here/"
}

capture before 300
capture after 200
"$nsys" --version
ls -l "$here"/before.* "$here"/after.*
