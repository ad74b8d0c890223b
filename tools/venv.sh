#!/usr/bin/env bash
# Create (or reuse) a virtual environment under .venvs/ with one OpenVINO release.
#
#   tools/venv.sh dev                 newest supported runtime + openvino_genai + test tools, ovpasses editable
#   tools/venv.sh ov 2026.0.0         .venvs/ov-2026.0.0: that runtime + openvino_genai/tokenizers of the
#                                     same release; ovpasses installed without dependencies
#   tools/venv.sh export              torch/transformers/optimum-intel for tools/export_gemma4.py
#   tools/venv.sh export-tf5.3.0      the same with transformers 5.3.0 (.venvs/export-tf5.3.0): Qwen3.5, LFM2,
#                                     Zamba2, Llama 4 text (tools/export_hybrids.py says why per family)
#   tools/venv.sh export-tf4.57.6     the same with transformers 4.57.6 and huggingface_hub 0.36: Qwen3-Next
#
# A venv whose stamp file matches the request is reused, so repeated calls cost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

NEWEST_OV=2026.4.1
PY=${PYTHON:-python3}
kind=${1:?usage: tools/venv.sh dev|ov VERSION|export}

make_venv() {  # make_venv DIR STAMP -- pip args...
    local dir=$1 stamp=$2; shift 2
    if [[ -f $dir/.ovpasses-stamp && $(cat "$dir/.ovpasses-stamp") == "$stamp" ]]; then
        return 0
    fi
    echo "tools/venv.sh: creating $dir ($stamp)" >&2
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    while [[ $# -gt 0 ]]; do
        local args=()
        while [[ $# -gt 0 && $1 != ";" ]]; do args+=("$1"); shift; done
        [[ $# -gt 0 ]] && shift
        "$dir/bin/python" -m pip install -q --disable-pip-version-check "${args[@]}"
    done
    echo "$stamp" > "$dir/.ovpasses-stamp"
}

case $kind in
    dev)
        make_venv .venvs/dev "dev-$NEWEST_OV-$(sha1sum pyproject.toml | cut -c1-12)" \
            "openvino==$NEWEST_OV" "openvino-genai==$NEWEST_OV.0" "openvino-tokenizers==$NEWEST_OV.0" \
            ";" -e ".[test,bench,dot]"
        ;;
    ov)
        v=${2:?usage: tools/venv.sh ov VERSION (e.g. 2026.0.0)}
        make_venv ".venvs/ov-$v" "ov-$v-$(sha1sum pyproject.toml | cut -c1-12)" \
            "openvino==$v" "openvino-genai==$v.0" "openvino-tokenizers==$v.0" numpy networkx filelock graphviz pytest hypothesis \
            ";" --no-deps -e .
        ;;
    export)
        make_venv .venvs/export "export-torch2.13.0-tf5.5.4-oi2.2.0" \
            torch==2.13.0 \
            ";" transformers==5.5.4 "openvino==$NEWEST_OV" "openvino-tokenizers==$NEWEST_OV.0" nncf requests \
            ";" --no-deps optimum==2.3.0 optimum-intel==2.2.0
        # Pillow backs the Gemma 4 image processor (tools/export_gemma4.py --preset vlm8). It is added
        # here, not to the stamped list above, so that an existing export venv gains it without a rebuild.
        .venvs/export/bin/python -c "import PIL" 2>/dev/null ||
            .venvs/export/bin/python -m pip install -q --disable-pip-version-check pillow==13.0.0
        ;;
    export-tf5.3.0|export-tf4.57.6)
        # optimum-intel 2.2.0's exporter imports cache classes (Qwen3_5DynamicCache, Lfm2HybridConvCache, ...)
        # that transformers 5.5.4 no longer has; Qwen3-Next's MoE block fails to trace under 5.3.0 and 5.5.4
        # fails on an import, so it exports under 4.57.6 (which needs huggingface_hub below 1.0)
        tf=${kind#export-tf}
        hub=()
        [[ $tf == 4.* ]] && hub=("huggingface_hub==0.36.0")
        make_venv ".venvs/$kind" "$kind-torch2.13.0-oi2.2.0" \
            torch==2.13.0 \
            ";" "transformers==$tf" "${hub[@]}" "openvino==$NEWEST_OV" "openvino-tokenizers==$NEWEST_OV.0" nncf requests \
            ";" --no-deps optimum==2.3.0 optimum-intel==2.2.0
        ;;
    *)
        echo "tools/venv.sh: unknown kind '$kind' (dev, ov VERSION, export, export-tf5.3.0, export-tf4.57.6)" >&2; exit 2 ;;
esac
