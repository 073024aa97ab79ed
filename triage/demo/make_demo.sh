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

# Five repeats a side for the noise-aware diff: forward 300 -> 200 us, backward 600 us on both
# sides (unchanged), interleaved so that the machine's load drifts over both sides alike. Only
# the SQLite exports ship, xz-compressed (the same bytes once decompressed; `triage demo` does).
mkdir -p "$here/repeats"
repeat() {  # name forward_us backward_us
    (cd "$work" && env -i PATH=/usr/bin:/bin HOME="$work" LANG=C.UTF-8 \
        "$(command -v "$nsys")" profile --trace=nvtx,osrt --sample=none --cpuctxsw=none \
        -o "$1" --force-overwrite true ./nvtx_steps 20 "$2" "$3" >/dev/null)
    "$nsys" export --type sqlite --quiet true --force-overwrite true --output "$work/$1.sqlite" \
        "$work/$1.nsys-rep" >/dev/null
    "$python" -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.compress(open(sys.argv[1], "rb").read(), preset=9))' \
        "$work/$1.sqlite" "$here/repeats/$1.sqlite.xz"
}
for i in 1 2 3 4 5; do
    repeat "before-$i" 300 600
    repeat "after-$i" 200 600
done
"$nsys" --version
ls -l "$here"/before.* "$here"/after.*
