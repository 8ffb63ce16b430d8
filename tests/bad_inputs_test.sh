#!/usr/bin/env bash
# The reliability table (tests/testdata/bad_inputs.txt): every bad input gets the expected
# exit code and a message with the expected key words, loses nothing (every fixture file
# keeps its bytes) and leaves nothing behind (no swap, lock or partial checkpoint file).
# Each case runs under a timeout: a hang fails it. Usage: bad_inputs_test.sh STRATA TABLE
set -uo pipefail
strata="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
table="$2"
D="${TEST_TMPDIR:-$(mktemp -d)}/bad-inputs"
rm -rf "$D"
mkdir -p "$D/adir" "$D/work" "$D/busy"
SHM=/dev/shm/strata-bad-inputs-$$
mkdir -p "$SHM"
TRAIN="train --set model.preset=tiny --set train.steps=2 --set train.eval_every=0"
failures=0
holder=""
cleanup() {
  if [[ -n "$holder" ]]; then
    pkill -P "$holder" 2>/dev/null
    kill "$holder" 2>/dev/null
  fi
  rm -rf "$SHM"
}
trap cleanup EXIT

# --- fixtures
for i in $(seq 400); do echo "the quick brown fox $i jumps over the lazy dog"; done > "$D/text.txt"
head -c 8192 /dev/urandom > "$D/random.bin"
mkfifo "$D/fifo"
# A device node of our own with /dev/full's major:minor (as root; never a system path).
[[ "$(id -u)" == 0 ]] && mknod "$D/fulldev" c 1 7
ln -s "$D/text.txt" "$D/link.txt"
printf '{"step": 1, "loss": 5.0, "ms_per_step": 3}\n{"step": 2, "loss": "high", "ms_per_step": 3}\n' \
  > "$D/metrics_string.jsonl"
printf '{"step": 1, "loss": 5.0, "ms_per_step": 3}\n' > "$D/metrics_ok.jsonl"
echo '{"traceEvents": [{"ph": "X", "name": "step 1", "tid": 1, "ts": "early", "dur": 5}]}' \
  > "$D/trace_string.json"
mkdir -p "$D/ck_locked"
printf 'strata-lock host=node-elsewhere pid=4242 start=1 run=abc\nsomeone else\n' \
  > "$D/ck_locked/strata-checkpoint.lock"
: > "$D/empty.txt"
printf 'ab' > "$D/short.txt"
llmc() {  # magic version declared_count token_count token_value
  perl -e 'print pack("l<256", $ARGV[0], $ARGV[1], $ARGV[2]), pack("S<*", ($ARGV[4]) x $ARGV[3])' "$@"
}
llmc 20240521 1 100 100 65 > "$D/badmagic.bin"
llmc 20240520 2 100 100 65 > "$D/v2.bin"
llmc 20240326 3 100 100 65 > "$D/model.bin"
llmc 20240520 1 100 50 65 > "$D/trunc.bin"
llmc 20240520 1 100 150 65 > "$D/long.bin"
llmc 20240520 1 100 100 300 > "$D/vocab.bin"
strata_tokens() {  # version declared_count bytes_per_token vocab token_count token_value
  perl -e 'print pack("l<256", 20261201, @ARGV[0..3]),
    pack($ARGV[2] == 4 ? "L<*" : "S<*", ($ARGV[5]) x $ARGV[4])' "$@"
}
strata_tokens 1 100 4 128256 100 70000 > "$D/strata_vocab.bin"
strata_tokens 1 100 3 0 100 65 > "$D/strata_width.bin"
strata_tokens 2 100 2 0 100 65 > "$D/strata_v2.bin"
echo '{"model": {"preset": "tiny"}, "train": {"steps": 2, "eval_every": 0}}' > "$D/ok.json"
perl -e 'print "[" x 100000, "]" x 100000' > "$D/deep.json"
perl -e 'print "{\"train\": {}}", " " x (2 << 20)' > "$D/big.json"
printf '{\n  "train": {"steps": 10,}\n}\n' > "$D/syntax.json"
echo '[1, 2]' > "$D/array.json"
echo '{"train": {"steps": "ten"}}' > "$D/wrongtype.json"
echo '{"steps": 3}' > "$D/toplevel.json"
: > "$D/empty.json"
echo '{"train": {"stesp": 3}}' > "$D/unknown.json"
mkdir -p "$D/nock"
# Hugging Face config.json files whose numbers do not fit their fields, or with a key twice.
hf_config() {  # dir, then JSON members put before the others
  mkdir -p "$D/$1"
  printf '{%s, "model_type": "llama", "hidden_act": "silu", "num_attention_heads": 4,
    "hidden_size": 32, "intermediate_size": 48, "max_position_embeddings": 16}\n' "$2" \
    > "$D/$1/config.json"
}
hf_config hf_wrapped '"num_hidden_layers": 2, "vocab_size": 4294967396'
hf_config hf_fraction '"num_hidden_layers": 2.9, "vocab_size": 100'
hf_config hf_bool '"num_hidden_layers": true, "vocab_size": 100'
hf_config hf_twice '"num_hidden_layers": 2, "vocab_size": 100, "num_hidden_layers": 12'
hf_config hf_bnb4 '"num_hidden_layers": 2, "vocab_size": 100, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}'
# A checkpoint, and damaged copies of it.
if ! "$strata" $TRAIN --set train.checkpoint_every=1 --set train.checkpoint_dir="$D/ck" \
    > "$D/ck.log" 2>&1; then
  echo "FAIL: could not make the checkpoint fixture"; cat "$D/ck.log"; exit 1
fi
for name in ck_json ck_sum ck_unit ck_bits ck_version; do cp -r "$D/ck" "$D/$name"; done
echo '{"format": "strata-checkpoint", "version": 4,' > "$D/ck_json/step-2/checkpoint.json"
sed -i 's/"next_step": 2/"next_step": 1/' "$D/ck_sum/step-2/checkpoint.json"
truncate -s -4 "$D/ck_unit/step-2/rank-00000.bin"
printf '\x7f' | dd of="$D/ck_bits/step-2/rank-00000.bin" bs=1 seek=100 conv=notrunc status=none
sed -i -E 's/"version": [0-9]+/"version": 99/' "$D/ck_version/step-2/checkpoint.json"
rm -f "$D/ck"/step-1/* 2>/dev/null; rm -rf "$D/ck/step-1" "$D"/ck_*/step-1
# The checkpoint exported, then a NaN written over the first weight of each file: a
# safetensors file's data starts after its 8-byte length and JSON header, llm.c's at 1024.
if ! "$strata" export --from "$D/ck" --to "hf:$D/hf_nan" > "$D/export.log" 2>&1 ||
   ! "$strata" export --from "$D/ck" --to "llmc:$D/llmc_nan.bin" >> "$D/export.log" 2>&1; then
  echo "FAIL: could not export the checkpoint fixture"; cat "$D/export.log"; exit 1
fi
# A model exported from the checkpoint, and a checkpoint trained from it (model.from=hf:).
if ! "$strata" export --from "$D/ck" --to "hf:$D/hf_src" >> "$D/export.log" 2>&1 ||
   ! "$strata" $TRAIN --set model.from="hf:$D/hf_src" --set train.checkpoint_every=2 \
       --set train.checkpoint_dir="$D/ck_hf" >> "$D/export.log" 2>&1; then
  echo "FAIL: could not make the hf: checkpoint fixture"; cat "$D/export.log"; exit 1
fi
perl -e 'open(my $f, "+<", $ARGV[0]) or die; binmode $f; read($f, my $n, 8);
  seek($f, 8 + unpack("Q<", $n), 0); print $f pack("L<", 0x7fc00000)' "$D/hf_nan/model.safetensors"
perl -e 'open(my $f, "+<", $ARGV[0]) or die; binmode $f; seek($f, 1024 + 4 * 70, 0);
  print $f pack("L<", 0x7f800000)' "$D/llmc_nan.bin"
# A model of 300 ids trained on bytes, exported without a tokenizer (sample cannot know one).
if ! "$strata" $TRAIN --set model.vocab=300 --set train.checkpoint_every=2 \
    --set train.checkpoint_dir="$D/ck300" > "$D/ck300.log" 2>&1 ||
   ! "$strata" export --from "$D/ck300" --to "hf:$D/hf300" >> "$D/ck300.log" 2>&1; then
  echo "FAIL: could not make the 300-id fixture"; cat "$D/ck300.log"; exit 1
fi
rm -rf "$D/ck300"
# A directory a live run holds (another process keeps its lock).
echo "strata run live99 rank 0: pid 1 on host elsewhere" > "$D/busy/strata-live99-rank0.lock"
flock -x "$D/busy/strata-live99-rank0.lock" sleep 600 < /dev/null > /dev/null 2>&1 &
holder=$!
for _ in $(seq 50); do
  flock -n -x "$D/busy/strata-live99-rank0.lock" true 2>/dev/null || break
  sleep 0.1
done

fingerprint() {
  (cd "$D" && find . "$SHM" -type f ! -path './work/*' -print0 | sort -z | xargs -0 md5sum)
}
leftovers() {
  find "$D" "$SHM" \( -name '*.swap' -o -name '*.partial' -o -name '*.partial-*' -o \
       \( -name 'strata-*.lock' ! -name 'strata-live99-rank0.lock' \
          ! -path "$D/ck_locked/strata-checkpoint.lock" \) \) -print
}
before="$(fingerprint)"

cases=0
while IFS= read -r line; do
  [[ -z "${line// }" || "$line" == \#* ]] && continue
  if [[ "$line" == *'$D/fulldev'* && ! -c "$D/fulldev" ]]; then
    echo "SKIPPED: ${line#*|} (a device node needs root)"
    continue
  fi
  cases=$((cases + 1))
  expected_rc="$(echo "${line%%|*}" | tr -d ' ')"
  rest="${line#*|}"
  args="${rest%%|*}"
  words="${rest#*|}"
  output="$D/work/out.txt"
  (cd "$D/work" && eval "timeout 60 \"$strata\" $args" > "$output" 2>&1 < /dev/null)
  rc=$?
  problem=""
  [[ "$rc" == 124 ]] && problem="timed out (a hang)"
  [[ -z "$problem" && "$rc" != "$expected_rc" ]] && problem="exit $rc, expected $expected_rc"
  IFS=';' read -ra fragments <<< "$words"
  for fragment in "${fragments[@]}"; do
    fragment="$(echo "$fragment" | sed 's/^ *//; s/ *$//')"
    [[ -z "$fragment" ]] && continue
    grep -qF -- "$fragment" "$output" || problem="$problem; no '$fragment' in the output"
  done
  after="$(fingerprint)"
  [[ "$after" != "$before" ]] && problem="$problem; a fixture file changed: $(diff <(echo "$before") <(echo "$after") | head -3)"
  left="$(leftovers)"
  [[ -n "$left" ]] && problem="$problem; left behind: $left"
  if [[ -n "$problem" ]]; then
    failures=$((failures + 1))
    echo "FAIL: strata$args: ${problem#; }"
    sed 's/^/    | /' "$output" | tail -5
    before="$after"
    find "$D" "$SHM" \( -name '*.swap' -o -name '*.partial' \) -exec rm -rf {} + 2>/dev/null
  fi
done < "$table"

echo "bad inputs: $cases cases, $failures failed"
[[ "$cases" -ge 100 ]] || { echo "FAIL: the table has $cases cases, fewer than 100"; exit 1; }
[[ "$failures" == 0 ]]
