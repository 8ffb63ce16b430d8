#!/usr/bin/env bash
# The `strata` binary as a user meets it: a short training run writes a JSONL metrics file
# with the documented keys and prints progress lines; bad configuration is rejected before
# any work with every problem listed at once and exit status 1.
set -uo pipefail
strata="$(realpath "$1")"  # absolute: one run below works in a directory of its own
spm_model="$2"  # a SentencePiece model of 512 pieces (data/tokenizer/testdata)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

"$strata" train --set model.preset=tiny --set train.steps=3 --set train.seq_len=16 \
  --set train.micro_batch=2 --set train.eval_every=3 --metrics "$tmp/m.jsonl" \
  > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "short training run failed"; }
[ "$(wc -l < "$tmp/m.jsonl")" -eq 3 ] || fail "expected 3 metrics lines"
for key in '"step":' '"loss":' '"lr":' '"ms_per_step":' '"tokens_per_s":' \
           '"peak_bytes":{"device":' '"host":' '"state_bytes":'; do
  grep -q "$key" "$tmp/m.jsonl" || fail "metrics lack $key"
done
grep -q '"val_loss":' "$tmp/m.jsonl" || fail "no val_loss at eval_every"
# Freed buffers are reused: from the third step on the step makes no allocator call.
sed -n 3p "$tmp/m.jsonl" | grep -q '"driver_calls":0' ||
  fail "step 3 made allocator calls: $(sed -n 3p "$tmp/m.jsonl" | grep -o '"driver_calls":[0-9]*')"
grep -q "step     3/3 | loss" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no progress line"; }
grep -q "rank 0/1" "$tmp/out.txt" || fail "log lines are not rank-prefixed"
grep -q "train.steps=3" "$tmp/out.txt" || fail "resolved config not logged"

# The LLaMA family from its preset: the model line names it, and 40 steps learn.
"$strata" train --set model.preset=llama-tiny --set train.steps=40 --set train.seq_len=32 \
  --set train.eval_every=0 --metrics "$tmp/llama.jsonl" > "$tmp/llama.txt" 2>&1 ||
  { cat "$tmp/llama.txt"; fail "llama-tiny run failed"; }
grep -q "model: LLaMA L2 H4 KV2 C64 F128 V256" "$tmp/llama.txt" ||
  { cat "$tmp/llama.txt"; fail "no LLaMA model line"; }
first=$(sed -n 1p "$tmp/llama.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(sed -n 40p "$tmp/llama.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "llama-tiny did not learn: loss $first -> $last"

# Out and back in: the llama checkpoint exported to a Hugging Face directory, trained on
# from there, and sampled from (greedy: the same text twice).
"$strata" train --set model.preset=llama-tiny --set train.steps=2 --set train.seq_len=32 \
  --set train.checkpoint_dir="$tmp/llama-ck" --set train.checkpoint_every=2 > /dev/null 2>&1 ||
  fail "llama checkpoint run failed"
"$strata" export --from "$tmp/llama-ck" --to "hf:$tmp/llama-hf" > "$tmp/export.txt" 2>&1 ||
  { cat "$tmp/export.txt"; fail "export failed"; }
grep -q "exported .* 1 safetensors file in F32 and config.json" "$tmp/export.txt" ||
  { cat "$tmp/export.txt"; fail "export did not say what it wrote"; }
[ -f "$tmp/llama-hf/model.safetensors" ] && [ -f "$tmp/llama-hf/config.json" ] ||
  fail "export wrote no safetensors/config.json"
"$strata" train --set model.from="hf:$tmp/llama-hf" --set train.steps=2 --set train.seq_len=32 \
  > "$tmp/from-hf.txt" 2>&1 || { cat "$tmp/from-hf.txt"; fail "training from hf: failed"; }
grep -q "model: LLaMA L2 H4 KV2 C64 F128 V256" "$tmp/from-hf.txt" ||
  { cat "$tmp/from-hf.txt"; fail "model.from did not set the model"; }
for run in 1 2; do
  "$strata" sample --from "$tmp/llama-ck" --prompt "Anne" --tokens 8 --temperature 0 \
    > "$tmp/sample$run.txt" 2> "$tmp/sample-err.txt" ||
    { cat "$tmp/sample-err.txt"; fail "sample failed"; }
done
cmp -s "$tmp/sample1.txt" "$tmp/sample2.txt" || fail "greedy samples differ"
[ "$(head -c 4 "$tmp/sample1.txt")" = "Anne" ] || fail "sample does not start with the prompt"
grep -q "new tokens at .* tokens/s" "$tmp/sample-err.txt" || fail "sample printed no rate"
"$strata" export --from "$tmp/llama-ck" --to "llmc:$tmp/x.bin" > "$tmp/llmc.txt" 2>&1
[ $? -eq 1 ] && grep -q "GPT-2 only" "$tmp/llmc.txt" || fail "llama to llm.c not refused"

# A checkpoint of two ranks (format 6: one file per rank): export and sample read it as one
# of one rank. Spread over two "nodes" (rank 1's file in another directory) export names the
# missing file and the host that wrote it, and `strata checkpoint consolidate` gathers it
# into one directory, which exports the same bytes and samples the same text.
"$strata" train --set model.preset=llama-tiny --set train.steps=2 --set train.seq_len=32 \
  --set zero.world=2 --set zero.stage=3 --set train.micro_batch=1 \
  --set train.checkpoint_dir="$tmp/ck2" --set train.checkpoint_every=2 > "$tmp/ck2.txt" 2>&1 ||
  { cat "$tmp/ck2.txt"; fail "world-2 checkpoint run failed"; }
[ -f "$tmp/ck2/step-2/rank-00000.bin" ] && [ -f "$tmp/ck2/step-2/rank-00001.bin" ] ||
  fail "a world-2 checkpoint without a file per rank"
"$strata" export --from "$tmp/ck2" --to "hf:$tmp/ck2-hf" > "$tmp/ck2-export.txt" 2>&1 ||
  { cat "$tmp/ck2-export.txt"; fail "export of a world-2 checkpoint failed"; }
"$strata" sample --from "$tmp/ck2" --prompt "Anne" --tokens 8 --temperature 0 \
  > "$tmp/ck2-sample.txt" 2> "$tmp/ck2-sample-err.txt" ||
  { cat "$tmp/ck2-sample-err.txt"; fail "sample from a world-2 checkpoint failed"; }
mkdir -p "$tmp/node1/step-2"
mv "$tmp/ck2/step-2/rank-00001.bin" "$tmp/node1/step-2/"
"$strata" export --from "$tmp/ck2" --to "hf:$tmp/ck2-missing" > "$tmp/missing.txt" 2>&1 &&
  fail "exported without rank 1's file"
grep -q "rank-00001.bin is missing on host .* (written by rank 1 on host " "$tmp/missing.txt" ||
  { cat "$tmp/missing.txt"; fail "the missing rank file is not named with its host"; }
"$strata" checkpoint consolidate --from "$tmp/ck2" --to "$tmp/one" > "$tmp/cons.txt" 2>&1 &&
  fail "consolidated without rank 1's file"
grep -q "rank-00001.bin (written by rank 1 on host .*) is in none of" "$tmp/cons.txt" ||
  { cat "$tmp/cons.txt"; fail "consolidate did not name the missing file"; }
"$strata" checkpoint consolidate --from "$tmp/ck2" --from "$tmp/node1" --to "$tmp/one" \
  > "$tmp/cons.txt" 2>&1 || { cat "$tmp/cons.txt"; fail "consolidate failed"; }
grep -q '"world": 1' "$tmp/one/checkpoint.json" && [ -f "$tmp/one/rank-00000.bin" ] ||
  fail "the consolidated checkpoint is not one of one rank"
"$strata" export --from "$tmp/one" --to "hf:$tmp/one-hf" > "$tmp/one-export.txt" 2>&1 ||
  { cat "$tmp/one-export.txt"; fail "export of the consolidated checkpoint failed"; }
cmp -s "$tmp/ck2-hf/model.safetensors" "$tmp/one-hf/model.safetensors" ||
  fail "the consolidated checkpoint exports other weights"
"$strata" sample --from "$tmp/one" --prompt "Anne" --tokens 8 --temperature 0 \
  > "$tmp/one-sample.txt" 2> /dev/null || fail "sample from the consolidated checkpoint failed"
cmp -s "$tmp/ck2-sample.txt" "$tmp/one-sample.txt" || fail "the consolidated checkpoint samples other text"
"$strata" checkpoint consolidate --from "$tmp/one" --to "$tmp/one" > "$tmp/cons.txt" 2>&1 &&
  fail "consolidate wrote over a directory"
grep -q "exists and is not an empty directory" "$tmp/cons.txt" || fail "no clear error for --to"

# A checkpoint remembers its tokenizer (here a SentencePiece model, given by a relative
# path): sample uses it without --tokenizer, export copies it into the Hugging Face
# directory as tokenizer.model, and the directory samples the same greedy text.
mkdir -p "$tmp/spm-run" && cp "$spm_model" "$tmp/spm-run/pieces.model"
(cd "$tmp/spm-run" && "$strata" train --set model.preset=llama-tiny --set model.vocab=512 \
  --set data.tokenizer=sentencepiece:pieces.model --set data.cache_dir=cache \
  --set train.steps=2 --set train.seq_len=16 --set train.checkpoint_dir=ck \
  --set train.checkpoint_every=2 > out.txt 2>&1) ||
  { cat "$tmp/spm-run/out.txt"; fail "training with a SentencePiece tokenizer failed"; }
grep -q "\"tokenizer\": *\"sentencepiece:$tmp/spm-run/pieces.model\"" \
  "$tmp/spm-run/ck/step-2/checkpoint.json" || fail "the checkpoint does not name its tokenizer"
"$strata" export --from "$tmp/spm-run/ck" --to "hf:$tmp/spm-hf" > "$tmp/spm-export.txt" 2>&1 ||
  { cat "$tmp/spm-export.txt"; fail "export with a tokenizer failed"; }
grep -q "its tokenizer (sentencepiece:.*): tokenizer.model" "$tmp/spm-export.txt" ||
  { cat "$tmp/spm-export.txt"; fail "export did not say it copied the tokenizer"; }
cmp -s "$spm_model" "$tmp/spm-hf/tokenizer.model" || fail "the exported tokenizer.model differs"
for from in "$tmp/spm-run/ck" "hf:$tmp/spm-hf"; do
  "$strata" sample --from "$from" --prompt "Anne Elliot" --tokens 12 --temperature 0 \
    > "$tmp/spm-sample.txt" 2> "$tmp/spm-sample-err.txt" ||
    { cat "$tmp/spm-sample-err.txt"; fail "sample from $from failed"; }
  grep -q "SentencePiece" "$tmp/spm-sample-err.txt" ||
    { cat "$tmp/spm-sample-err.txt"; fail "sample from $from did not use the tokenizer"; }
  cat "$tmp/spm-sample.txt" >> "$tmp/spm-samples.txt"
done
[ "$(sed -n 1p "$tmp/spm-samples.txt")" = "$(sed -n 2p "$tmp/spm-samples.txt")" ] &&
  [ "$(head -c 11 "$tmp/spm-samples.txt")" = "Anne Elliot" ] ||
  { cat "$tmp/spm-samples.txt"; fail "the checkpoint and its export sample differently"; }
# The checkpoint holds a copy of the tokenizer: with the run's file moved away, export
# copies the checkpoint's own and sample gives the same text. A changed copy is named:
# export writes the weights and says so; sample asks for --tokenizer.
cmp -s "$spm_model" "$tmp/spm-run/ck/step-2/tokenizer/tokenizer.model" ||
  fail "the checkpoint holds no copy of its tokenizer"
mv "$tmp/spm-run/pieces.model" "$tmp/spm-run/moved.model"
"$strata" export --from "$tmp/spm-run/ck" --to "hf:$tmp/spm-hf2" > "$tmp/spm-export2.txt" 2>&1 &&
  grep -q "the checkpoint's copy): tokenizer.model" "$tmp/spm-export2.txt" &&
  cmp -s "$spm_model" "$tmp/spm-hf2/tokenizer.model" ||
  { cat "$tmp/spm-export2.txt"; fail "export without the run's tokenizer file did not use the copy"; }
"$strata" sample --from "$tmp/spm-run/ck" --prompt "Anne Elliot" --tokens 12 --temperature 0 \
  > "$tmp/spm-sample.txt" 2> "$tmp/spm-sample-err.txt" &&
  [ "$(cat "$tmp/spm-sample.txt")" = "$(sed -n 1p "$tmp/spm-samples.txt")" ] ||
  { cat "$tmp/spm-sample-err.txt" "$tmp/spm-sample.txt"; fail "sample with the copy differs"; }
echo x >> "$tmp/spm-run/ck/step-2/tokenizer/tokenizer.model"
"$strata" export --from "$tmp/spm-run/ck" --to "hf:$tmp/spm-hf3" > "$tmp/spm-export3.txt" 2>&1 &&
  grep -q "tokenizer.model has XXH3 .*: not copied" "$tmp/spm-export3.txt" &&
  [ -f "$tmp/spm-hf3/config.json" ] && [ ! -e "$tmp/spm-hf3/tokenizer.model" ] ||
  { cat "$tmp/spm-export3.txt"; fail "export with a changed tokenizer copy not said"; }
"$strata" sample --from "$tmp/spm-run/ck" --prompt "Anne" --tokens 2 > /dev/null \
  2> "$tmp/spm-sample-err.txt"
[ $? -eq 1 ] && grep -q "tokenizer file .*tokenizer.model has XXH3.*--tokenizer" \
  "$tmp/spm-sample-err.txt" || { cat "$tmp/spm-sample-err.txt"; fail "a changed copy not named"; }

# A model with more ids than its tokenizer (Qwen2 pads its vocabulary; here 600 against 512
# pieces) draws only ids the tokenizer has, and says so; the text streams whole characters
# (byte-fallback pieces make up the ones outside the 512). A model without a tokenizer
# prints its ids with --print_ids.
(cd "$tmp/spm-run" && "$strata" train --set model.preset=llama-tiny --set model.vocab=600 \
  --set data.tokenizer=sentencepiece:moved.model --set data.cache_dir=cache \
  --set train.steps=2 --set train.seq_len=16 --set train.checkpoint_dir=ck600 \
  --set train.checkpoint_every=2 > out600.txt 2>&1) ||
  { cat "$tmp/spm-run/out600.txt"; fail "training with 600 ids failed"; }
"$strata" sample --from "$tmp/spm-run/ck600" --prompt "Anne" --tokens 64 --seed 5 \
  > "$tmp/spm600.txt" 2> "$tmp/spm600-err.txt" &&
  grep -q "the tokenizer has 512 ids, the model 600: only ids below 512 are drawn" \
    "$tmp/spm600-err.txt" ||
  { cat "$tmp/spm600-err.txt"; fail "sample with a tokenizer smaller than the model"; }
[ "$(head -c 4 "$tmp/spm600.txt")" = "Anne" ] && [ "$(wc -c < "$tmp/spm600.txt")" -lt 2000 ] ||
  { head -c 300 "$tmp/spm600.txt"; fail "sample's text is not the prompt and its continuation"; }
"$strata" export --from "$tmp/spm-run/ck600" --to "hf:$tmp/hf600" > /dev/null 2>&1 &&
  rm "$tmp/hf600/tokenizer.model" || fail "export of the 600-id model failed"
"$strata" sample --from "hf:$tmp/hf600" --prompt "Anne" --tokens 6 --print_ids \
  > "$tmp/ids.txt" 2> "$tmp/ids-err.txt" &&
  grep -qE '^[0-9]+( [0-9]+){5}$' "$tmp/ids.txt" ||
  { cat "$tmp/ids-err.txt" "$tmp/ids.txt"; fail "sample --print_ids"; }

# Real tokenizers: GPT-2's BPE tokenizes the corpus once into the cache, a second run loads
# the cached file; strata tokenize writes a token file that trains as it is.
gpt2_dir="${STRATA_TOKENIZER_DIR:-/usr/local/share/strata/tokenizers}/gpt2"
if [ -f "$gpt2_dir/encoder.json" ] && [ -f "$gpt2_dir/vocab.bpe" ]; then
  bpe=(--set model.preset=tiny --set model.vocab=50257 --set data.tokenizer=gpt2
       --set data.cache_dir="$tmp/token-cache" --set train.steps=2 --set train.seq_len=16)
  for run in 1 2; do
    "$strata" train "${bpe[@]}" > "$tmp/bpe$run.txt" 2>&1 ||
      { cat "$tmp/bpe$run.txt"; fail "training with data.tokenizer=gpt2 failed"; }
    grep -q "tokenizer: GPT-2 byte-level BPE" "$tmp/bpe$run.txt" ||
      { cat "$tmp/bpe$run.txt"; fail "no tokenizer line"; }
  done
  [ "$(ls "$tmp/token-cache" | wc -l)" -eq 1 ] || fail "the cache should hold one file"
  # A gpt2-tokenized checkpoint samples with GPT-2's BPE by itself, and its export carries
  # the files as Hugging Face names them (vocab.json, merges.txt), which sample from there.
  "$strata" train "${bpe[@]}" --set train.checkpoint_dir="$tmp/bpe-ck" \
    --set train.checkpoint_every=2 > "$tmp/bpe-ck.txt" 2>&1 ||
    { cat "$tmp/bpe-ck.txt"; fail "gpt2 checkpoint run failed"; }
  "$strata" export --from "$tmp/bpe-ck" --to "hf:$tmp/bpe-hf" > "$tmp/bpe-export.txt" 2>&1 &&
    grep -q "its tokenizer (gpt2, the checkpoint.s copy): vocab.json, merges.txt" "$tmp/bpe-export.txt" ||
    { cat "$tmp/bpe-export.txt"; fail "export did not carry GPT-2's files"; }
  cmp -s "$gpt2_dir/encoder.json" "$tmp/bpe-hf/vocab.json" &&
    cmp -s "$gpt2_dir/vocab.bpe" "$tmp/bpe-hf/merges.txt" || fail "GPT-2's files differ"
  rm -f "$tmp/bpe-samples.txt"
  for from in "$tmp/bpe-ck" "hf:$tmp/bpe-hf"; do
    "$strata" sample --from "$from" --prompt "Anne Elliot" --tokens 6 --temperature 0 \
      > "$tmp/bpe-sample.txt" 2> "$tmp/bpe-sample-err.txt" &&
      grep -q "GPT-2 byte-level BPE" "$tmp/bpe-sample-err.txt" ||
      { cat "$tmp/bpe-sample-err.txt"; fail "sample from $from did not use GPT-2's BPE"; }
    cat "$tmp/bpe-sample.txt" >> "$tmp/bpe-samples.txt"
  done
  [ "$(sed -n 1p "$tmp/bpe-samples.txt")" = "$(sed -n 2p "$tmp/bpe-samples.txt")" ] ||
    { cat "$tmp/bpe-samples.txt"; fail "the gpt2 checkpoint and its export sample differently"; }
  grep -q "strata token file" "$tmp/bpe2.txt" || grep -q "tokens cached in" "$tmp/bpe2.txt" ||
    fail "second run did not use the cache"
  "$strata" tokenize --tokenizer gpt2 --out "$tmp/corpus.tokens" > "$tmp/tok.txt" 2>&1 ||
    { cat "$tmp/tok.txt"; fail "strata tokenize failed"; }
  "$strata" train --set model.preset=tiny --set model.vocab=50257 --set train.steps=2 \
    --set train.seq_len=16 --set data.path="$tmp/corpus.tokens" > "$tmp/tokfile.txt" 2>&1 ||
    { cat "$tmp/tokfile.txt"; fail "training on the tokenize output failed"; }
  "$strata" train --set model.preset=tiny --set data.tokenizer=gpt2 --set train.steps=1 \
    > "$tmp/small-vocab.txt" 2>&1
  grep -q "set model.vocab to at least 50257" "$tmp/small-vocab.txt" ||
    { cat "$tmp/small-vocab.txt"; fail "a vocabulary too small for the tokenizer not named"; }
else
  echo "SKIPPED: GPT-2 tokenizer files not installed in $gpt2_dir (tools/install_deps.sh)"
fi

# Several bad keys and values: one error listing all of them, before any work.
"$strata" train --set train.stpes=5 --set train.lr=-1 --set device.memory_limit=lots \
  --set zero.stage=7 > "$tmp/bad.txt" 2>&1
[ $? -eq 1 ] || fail "bad config should exit 1"
for fragment in "train.stpes" "did you mean train.steps" "train.lr" "device.memory_limit" \
                "zero.stage"; do
  grep -q "$fragment" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "error lacks $fragment"; }
done
grep -q "step " "$tmp/bad.txt" && fail "training started despite bad config"

# A missing data file names the file.
"$strata" train --set model.preset=tiny --set data.path=/nonexistent/x.txt > "$tmp/nf.txt" 2>&1
[ $? -eq 1 ] || fail "missing data should exit 1"
grep -q "/nonexistent/x.txt" "$tmp/nf.txt" || { cat "$tmp/nf.txt"; fail "error lacks the path"; }

# A metrics file that cannot be written is an error naming it.
"$strata" train --set model.preset=tiny --metrics /nonexistent/dir/m.jsonl > "$tmp/mf.txt" 2>&1
[ $? -eq 1 ] || fail "unwritable metrics should exit 1"
grep -q "/nonexistent/dir/m.jsonl" "$tmp/mf.txt" || fail "error lacks the metrics path"
# Offload: a short run with the optimizer and grads on the host reports the host tier and
# the optimizer's exposed time; an impossible placement is refused saying what would work.
"$strata" train --set model.preset=tiny --set train.steps=2 --set train.seq_len=16 \
  --set zero.stage=2 --set zero.optimizer_tier=host --set zero.grad_tier=host \
  --metrics "$tmp/off.jsonl" > "$tmp/off.txt" 2>&1 || { cat "$tmp/off.txt"; fail "offload run failed"; }
grep -q "host tier of rank 0 after set-up" "$tmp/off.txt" || fail "no host tier line"
grep -q '"optimizer_exposed_ms":' "$tmp/off.jsonl" || fail "metrics lack optimizer_exposed_ms"
"$strata" train --set model.preset=tiny --set train.steps=3 --set train.seq_len=16 \
  --set zero.stage=2 --set zero.optimizer_tier=host --set zero.grad_tier=host \
  --set zero.param_update=delayed --set train.eval_every=2 > "$tmp/dpu.txt" 2>&1 \
  || { cat "$tmp/dpu.txt"; fail "delayed-update run failed"; }
grep -q "zero.param_update=delayed: each step" "$tmp/dpu.txt" || fail "no delayed-update line"
grep -q "val " "$tmp/dpu.txt" || fail "no evaluation in the delayed-update run"
"$strata" train --set model.preset=tiny --set zero.stage=2 --set zero.param_update=delayed \
  > "$tmp/dpu_bad.txt" 2>&1
[ $? -eq 1 ] || fail "delayed update with the optimizer on the device should exit 1"
grep -q "zero.optimizer_tier=host" "$tmp/dpu_bad.txt" || { cat "$tmp/dpu_bad.txt"; fail "delayed-update error lacks the fix"; }
"$strata" train --set model.preset=tiny --set zero.stage=1 --set zero.param_tier=host \
  > "$tmp/place.txt" 2>&1
[ $? -eq 1 ] || fail "param_tier=host at stage 1 should exit 1"
grep -q "set zero.stage=3" "$tmp/place.txt" || { cat "$tmp/place.txt"; fail "placement error lacks the fix"; }

# ZeRO-Infinity: a short run with the optimizer, params and gradient sums in swap files
# under $tmp reports its NVMe traffic and leaves no swap file behind; a missing swap
# directory is refused naming it, before any step.
mkdir -p "$tmp/swap"
"$strata" train --set model.preset=tiny --set train.steps=2 --set train.seq_len=16 \
  --set zero.stage=3 --set zero.optimizer_tier=nvme --set zero.param_tier=nvme \
  --set zero.grad_tier=nvme \
  --set zero.nvme_dir="$tmp/swap" --metrics "$tmp/inf.jsonl" > "$tmp/inf.txt" 2>&1 \
  || { cat "$tmp/inf.txt"; fail "nvme run failed"; }
grep -q '"nvme_bytes":{"read":[1-9]' "$tmp/inf.jsonl" || { cat "$tmp/inf.jsonl"; fail "no nvme reads in the metrics"; }
[ -z "$(ls -A "$tmp/swap")" ] || fail "swap files left behind: $(ls "$tmp/swap")"
"$strata" train --set model.preset=tiny --set zero.stage=1 --set zero.optimizer_tier=nvme \
  --set zero.nvme_dir=/nonexistent/swapdir > "$tmp/nodir.txt" 2>&1
[ $? -eq 1 ] || fail "a missing swap dir should exit 1"
grep -q "/nonexistent/swapdir" "$tmp/nodir.txt" || { cat "$tmp/nodir.txt"; fail "error lacks the swap dir"; }
grep -q "step " "$tmp/nodir.txt" && fail "training started without a swap dir"

# Checkpoints: a run writes step-2 and step-4; a run resumed from step-2 in another
# placement says so, runs steps 3-4 only, and logs the same losses for them.
ck=(--set model.preset=tiny --set train.steps=4 --set train.seq_len=16 --set train.eval_every=0)
"$strata" train "${ck[@]}" --set train.checkpoint_dir="$tmp/ck" --set train.checkpoint_every=2 \
  --metrics "$tmp/ck.jsonl" > "$tmp/ck.txt" 2>&1 || { cat "$tmp/ck.txt"; fail "checkpointing run failed"; }
grep -q "checkpoint: $tmp/ck/step-2" "$tmp/ck.txt" || { cat "$tmp/ck.txt"; fail "no step-2 checkpoint logged"; }
[ -f "$tmp/ck/step-4/checkpoint.json" ] || fail "no step-4 checkpoint"
grep -q '"checkpoint":{"ms":[0-9.]*,"path":"'"$tmp/ck/step-4"'"}' "$tmp/ck.jsonl" \
  || { cat "$tmp/ck.jsonl"; fail "the step-4 record lacks its checkpoint"; }
"$strata" train "${ck[@]}" --set train.resume="$tmp/ck/step-2" --set zero.stage=2 \
  --set zero.optimizer_tier=host --set zero.grad_tier=host --metrics "$tmp/ck.jsonl" \
  > "$tmp/resumed.txt" 2>&1 || { cat "$tmp/resumed.txt"; fail "resumed run failed"; }
[ "$(wc -l < "$tmp/ck.jsonl")" -eq 6 ] || { cat "$tmp/ck.jsonl"; fail "the resumed run did not append its 2 records to the 4"; }
grep -q "resumed from $tmp/ck/step-2: steps 3 to 4" "$tmp/resumed.txt" || { cat "$tmp/resumed.txt"; fail "resume not said"; }
grep -q "step     1/4" "$tmp/resumed.txt" && fail "the resumed run ran step 1"
losses_of() { grep -o "step     [34]/4 | loss [0-9.]*" "$1"; }
[ "$(losses_of "$tmp/ck.txt")" = "$(losses_of "$tmp/resumed.txt")" ] \
  || { losses_of "$tmp/ck.txt"; losses_of "$tmp/resumed.txt"; fail "resumed losses differ"; }
grep -q "its run had train.steps" "$tmp/resumed.txt" && fail "the same train.steps was said to differ"
# Resuming with another train.steps (another learning-rate schedule) is said, not silent.
"$strata" train "${ck[@]}" --set train.resume="$tmp/ck/step-2" --set train.steps=6 \
  > "$tmp/resumed6.txt" 2>&1 || { cat "$tmp/resumed6.txt"; fail "resumed run with 6 steps failed"; }
grep -q "its run had train.steps=4, this one has 6: the learning-rate schedule" "$tmp/resumed6.txt" \
  || { cat "$tmp/resumed6.txt"; fail "another train.steps was not said"; }

# bench offload runs end to end on a tiny model and prints its ratios.
"$strata" bench offload --steps 1 --set model.preset=tiny --set train.seq_len=16 \
  > "$tmp/bo.txt" 2>&1 || { cat "$tmp/bo.txt"; fail "bench offload failed"; }
grep -q "exposed / standalone optimizer time" "$tmp/bo.txt" || { cat "$tmp/bo.txt"; fail "bench offload lacks its ratio"; }
# bench lora on a tiny LLaMA: every part's goal line, its swap directory removed after.
mkdir -p "$tmp/bl"
"$strata" bench lora --pairs 1 --steps 1 --nvme-steps 1 --dir "$tmp/bl" \
  --set model.channels=64 --set model.layers=2 --set model.heads=4 --set model.kv_heads=2 \
  --set model.ffn_hidden=128 --set model.vocab=256 --set model.max_seq_len=64 \
  --set train.micro_batch=2 --set train.seq_len=16 > "$tmp/bl.txt" 2>&1 \
  || { cat "$tmp/bl.txt"; fail "bench lora failed"; }
for line in "goal NF4 matrices <= 0.53 bytes/param" "goal int8 matrices <= 1.07" \
    "step time nf4 / bf16 base on" "NVMe reads of the quantized matrices nf4 / bf16"; do
  grep -q "$line" "$tmp/bl.txt" || { cat "$tmp/bl.txt"; fail "bench lora lacks '$line'"; }
done
[ -z "$(ls -A "$tmp/bl")" ] || fail "bench lora left $(ls "$tmp/bl") in its --dir"
echo "PASS"
