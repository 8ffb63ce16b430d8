// See sample.h.
#include "sample/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "interop/export_weights.h"
#include "interop/import_weights.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"

namespace strata {

namespace {

// The model `source` holds, resolved (from config.json or checkpoint.json alone).
StatusOr<ModelOptions> SourceModel(const std::string& source,
                                   std::optional<OpenedCheckpoint>* checkpoint) {
  if (absl::StartsWith(source, "hf:")) {
    ASSIGN_OR_RETURN(const ModelOptions model, ReadHfConfig(source.substr(3)));
    return ResolveModelOptions(model);
  }
  ASSIGN_OR_RETURN(OpenedCheckpoint opened, OpenCheckpoint(source));
  const ModelOptions model = opened.model;
  checkpoint->emplace(std::move(opened));
  return model;
}

}  // namespace

StatusOr<int> PositionLimit(const std::string& source) {
  std::optional<OpenedCheckpoint> checkpoint;
  ASSIGN_OR_RETURN(const ModelOptions model, SourceModel(source, &checkpoint));
  const int window = model.sliding_window;
  return window > 0 ? std::min(window, model.max_seq_len) : model.max_seq_len;
}

Generator::~Generator() {
  if (stream_) (void)stream_->Synchronize();
}

StatusOr<std::unique_ptr<Generator>> Generator::Create(const std::string& source,
                                                       const Options& options, int max_len,
                                                       int prefill_rows) {
  std::unique_ptr<Generator> g(new Generator());
  // The model's shape and a way to read each unit's fp32 values.
  std::optional<OpenedCheckpoint> checkpoint;
  ASSIGN_OR_RETURN(g->model_options_, SourceModel(source, &checkpoint));
  if (checkpoint) RETURN_IF_ERROR(VerifyCheckpointFiles(*checkpoint, false));
  const std::string hf_dir = checkpoint ? "" : source.substr(3);
  if (max_len < 1 || max_len > g->model_options_.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample: ", max_len, " positions (prompt + new tokens) do not fit the model's ",
        g->model_options_.max_seq_len));
  }
  if (const int window = g->model_options_.sliding_window; window > 0 && max_len > window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample: ", max_len, " positions (prompt + new tokens) exceed the model's sliding window ",
        "of ", window, " (strata's attention is full causal, the same only within the window)"));
  }
  if (prefill_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: prefill_rows ", prefill_rows, ": expected >= 1"));
  }
  g->max_len_ = max_len;
  g->prefill_rows_ = std::min(prefill_rows, max_len);
  Options device_options = options;
  device_options.model = g->model_options_;
  ASSIGN_OR_RETURN(g->backend_, CreateBackend(device_options));
  // A LoRA checkpoint runs unmerged: the model with its adapters, the base made again from
  // its source (interop/export_weights.h) and checked against the checkpoint's hash.
  const bool lora = checkpoint && checkpoint->lora.enabled();
  ASSIGN_OR_RETURN(g->model_,
                   CreateModel(g->model_options_, Recompute::kNone, options.train.dtype,
                               lora ? CheckpointLoraOptions(*checkpoint) : LoraOptions{}));
  int first_adapter = 0;
  std::optional<LoraBaseReader> base;
  if (lora) {
    ASSIGN_OR_RETURN(first_adapter, CheckAdapterUnits(*checkpoint, *g->model_));
    ASSIGN_OR_RETURN(LoraBaseReader opened,
                     LoraBaseReader::Open(*checkpoint, *g->model_, "sample"));
    base.emplace(std::move(opened));
  }
  Device& device = *g->backend_.device;
  ASSIGN_OR_RETURN(g->stream_, device.CreateStream("sample"));
  std::optional<HfWeights> weights;
  if (!hf_dir.empty()) {
    ASSIGN_OR_RETURN(HfWeights opened, HfWeights::Open(hf_dir, g->model_options_, *g->model_));
    weights.emplace(std::move(opened));
  }

  // Every unit's params on the device: fp32 values, staged, cast to the compute dtype.
  const DType dtype = options.train.dtype;
  const auto& units = g->model_->units();
  std::vector<float> values;
  BaseHasher base_hash;  // of a LoRA base, as its units go by (they come first, in order)
  for (size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    const size_t n = units[u].used_elements();
    values.assign(n, 0.0f);
    if (weights) {
      RETURN_IF_ERROR(weights->Fill(unit, 0, n, values.data(), nullptr));
    } else if (base && unit < first_adapter) {
      RETURN_IF_ERROR(base->Read(unit, &values, &base_hash));
    } else {
      RETURN_IF_ERROR(ReadCheckpointMaster(*checkpoint, unit - first_adapter, 0, n,
                                           values.data()));
    }
    ASSIGN_OR_RETURN(Buffer param, device.Allocate(Tier::kDevice, StateKind::kParams,
                                                   n * DTypeBytes(dtype), units[u].name()));
    ASSIGN_OR_RETURN(Buffer staging, device.Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                     n * sizeof(float), "parameter staging"));
    RETURN_IF_ERROR(device.CopyAsync(staging.data(), values.data(), n * sizeof(float),
                                     *g->stream_));
    RETURN_IF_ERROR(g->backend_.ops->CastFromFloat(*g->stream_, param.data(),
                                                   staging.as<float>(), n));
    RETURN_IF_ERROR(g->stream_->Synchronize());
    g->params_.push_back(std::move(param));
  }
  if (base) {
    RETURN_IF_ERROR(CheckLoraBaseHash(*checkpoint, *base, base_hash.Hex(), "sample"));
    g->lora_ = absl::StrCat(" with LoRA adapters of rank ", checkpoint->lora.rank, " (",
                            checkpoint->lora.targets, ") on ", base->Describe());
  }
  RETURN_IF_ERROR(g->model_->PrepareDecode(device, max_len, g->prefill_rows_));
  ASSIGN_OR_RETURN(g->token_, device.Allocate(Tier::kDevice, StateKind::kActivations,
                                              g->prefill_rows_ * sizeof(int32_t),
                                              "sample tokens"));
  ASSIGN_OR_RETURN(g->logits_f32_,
                   device.Allocate(Tier::kDevice, StateKind::kActivations,
                                   g->model_options_.padded_vocab * sizeof(float),
                                   "sample logits"));
  g->ctx_.device = &device;
  g->ctx_.ops = g->backend_.ops.get();
  g->ctx_.stream = g->stream_.get();
  for (const Buffer& param : g->params_) g->ctx_.params.push_back(param.data());
  g->ctx_.grads.assign(units.size(), nullptr);
  g->ctx_.inputs = g->token_.as<int32_t>();
  g->ctx_.batch = 1;
  g->ctx_.seq_len = 1;
  return g;
}

StatusOr<std::vector<float>> Generator::Prefill(absl::Span<const int32_t> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("sample: Prefill needs tokens");
  if (tokens.size() > static_cast<size_t>(max_len_ - position_)) {
    return absl::OutOfRangeError(absl::StrCat("sample: the KV cache holds ", max_len_,
                                              " positions, ", position_, " used, ",
                                              tokens.size(), " more asked for"));
  }
  for (const int32_t token : tokens) {
    if (token < 0 || token >= model_options_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sample: token ", token,
                                                     " is outside the vocabulary (",
                                                     model_options_.vocab, ")"));
    }
  }
  Device& device = *backend_.device;
  for (size_t done = 0; done < tokens.size();) {
    const int rows = static_cast<int>(std::min<size_t>(prefill_rows_, tokens.size() - done));
    RETURN_IF_ERROR(device.CopyAsync(token_.data(), tokens.data() + done, rows * sizeof(int32_t),
                                     *stream_));
    RETURN_IF_ERROR(model_->DecodeStep(ctx_, position_, rows));
    // In stream order, the next batch's copy into token_ runs after this DecodeStep; the
    // copies' sources (the caller's tokens) live until the Synchronize below.
    position_ += rows;
    done += static_cast<size_t>(rows);
  }
  const int Vp = model_options_.padded_vocab;
  RETURN_IF_ERROR(backend_.ops->CastToFloat(*stream_, logits_f32_.as<float>(), model_->logits(),
                                            Vp));
  std::vector<float> logits(Vp);
  RETURN_IF_ERROR(device.CopyAsync(logits.data(), logits_f32_.data(), Vp * sizeof(float),
                                   *stream_));
  RETURN_IF_ERROR(stream_->Synchronize());
  logits.resize(model_options_.vocab);  // the padding is no token
  return logits;
}

Status Generate(Generator& generator, const std::vector<int32_t>& prompt, int count,
                const SamplingOptions& sampling, std::mt19937_64& rng, const TokenSink& sink) {
  if (generator.position() != 0) {
    return absl::FailedPreconditionError("sample: Generate needs a fresh generator");
  }
  if (prompt.empty() || count < 1) {
    return absl::InvalidArgumentError("sample: Generate needs a prompt and a count >= 1");
  }
  const int cache = generator.max_len();
  std::vector<int32_t> sequence(prompt);  // the whole text so far, for the windows
  const size_t first = prompt.size() > size_t(cache) ? prompt.size() - cache : 0;
  StatusOr<std::vector<float>> logits =
      generator.Prefill(absl::MakeConstSpan(prompt).subspan(first));
  RETURN_IF_ERROR(logits.status());
  for (int drawn = 0; drawn < count; ++drawn) {
    const int32_t next = DrawToken(*logits, sampling, rng);
    sequence.push_back(next);
    RETURN_IF_ERROR(sink(next, *logits, generator.position()));
    if (drawn + 1 == count) break;
    if (generator.position() == cache) {  // full: the newest half again, `next` last
      generator.Restart();
      const size_t keep = std::max(1, cache / 2);
      logits = generator.Prefill(absl::MakeConstSpan(sequence).subspan(sequence.size() - keep));
    } else {
      logits = generator.Feed(next);
    }
    RETURN_IF_ERROR(logits.status());
  }
  return absl::OkStatus();
}

std::string Generator::Describe() const {
  return absl::StrCat(model_->Describe(), lora_, " on ", backend_.device->Describe());
}

Status ValidateSampling(const SamplingOptions& sampling) {
  if (!(sampling.temperature >= 0.0f) || !std::isfinite(sampling.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: --temperature ", sampling.temperature, ": expected >= 0"));
  }
  if (sampling.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: --top_k ", sampling.top_k, ": expected >= 0 (0 = every token)"));
  }
  return absl::OkStatus();
}

int32_t DrawToken(const std::vector<float>& logits, const SamplingOptions& sampling,
                  std::mt19937_64& rng) {
  const int V = sampling.drawable_ids > 0
                    ? std::min(sampling.drawable_ids, static_cast<int>(logits.size()))
                    : static_cast<int>(logits.size());
  if (sampling.temperature == 0.0f || sampling.top_k == 1) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) -
                                logits.begin());
  }
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int k = sampling.top_k > 0 ? std::min(sampling.top_k, V) : V;
  // With top-k, the k most likely first (ties by id); without, every token in id order.
  // Either way the draw depends only on the logits and rng.
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
  }
  const double top = *std::max_element(logits.begin(), logits.begin() + V);
  std::vector<double> weights(k);
  for (int i = 0; i < k; ++i) {
    weights[i] = std::exp((logits[order[i]] - top) / sampling.temperature);
  }
  double total = 0.0;
  for (double w : weights) total += w;
  // A uniform draw in [0, total) from the generator's top 53 bits, through the cumulative
  // weights (the standard distributions' results differ between standard libraries).
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  for (int i = 0; i < k; ++i) {
    cumulative += weights[i];
    if (u < cumulative) return order[i];
  }
  return order[k - 1];
}

}  // namespace strata
