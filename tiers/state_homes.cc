// Device and host homes of gradient sums and optimizer state; see state_homes.h.
#include "tiers/state_homes.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <tuple>

namespace strata {
namespace {

char* At(void* base, size_t elements, size_t element_bytes) {
  return static_cast<char*>(base) + elements * element_bytes;
}

StatusOr<std::vector<std::unique_ptr<Event>>> MakeEvents(Device& device, size_t count) {
  std::vector<std::unique_ptr<Event>> events;
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device.CreateEvent());
    events.push_back(std::move(event));
  }
  return events;
}

// Events a host buffer set records in rotation, one per use, and the NVMe writes held on
// each (NvmeTier::WriteAfter): a write held on an event must be out before the event is
// recorded again (nvme_tier.h), which with several events per buffer set almost never
// waits.
class RotatingEvents {
 public:
  Status Create(Device& device, size_t count) {
    ASSIGN_OR_RETURN(events_, MakeEvents(device, count));
    held_.assign(count, {});
    return absl::OkStatus();
  }
  // Starts the next use: waits for the writes held on its event; returns the use's index.
  StatusOr<size_t> Next() {
    const size_t use = uses_++ % events_.size();
    for (const auto& [tier, ticket] : held_[use]) RETURN_IF_ERROR(tier->Wait(ticket));
    held_[use].clear();
    return use;
  }
  Event& operator[](size_t use) { return *events_[use]; }
  // The event of the use before `use` (the current one), or null for the first use.
  Event* previous(size_t use) {
    return uses_ > 1 ? events_[(use + events_.size() - 1) % events_.size()].get() : nullptr;
  }
  // `ticket` of `tier` is a write held on event `use`.
  void Hold(size_t use, NvmeTier* tier, NvmeTier::Ticket ticket) {
    held_[use].push_back({tier, ticket});
  }

 private:
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<std::vector<std::pair<NvmeTier*, NvmeTier::Ticket>>> held_;
  size_t uses_ = 0;
};

// The fp32 state one AdamW sub-step works on; each pointer is the unit element at
// `state_offset` (see AdamOverRange).
struct AdamState {
  float* master;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
};

AdamState StateOf(UnitState& state, const float* grads) {
  return {state.master.as<float>(), grads, state.exp_avg.as<float>(),
          state.exp_avg_sq.as<float>()};
}

// Runs AdamW over `range` of a unit tensor by tensor on `ops`/`stream`; `param_base` is the
// params' element at range.begin.
Status AdamOverRange(const HomeContext& ctx, Ops& ops, Stream& stream, int unit,
                     const AdamParams& params, ShardRange range, size_t state_offset,
                     const AdamState& state, void* param_base) {
  const size_t element_bytes = DTypeBytes(ctx.dtype);
  for (const TensorSpec& tensor : (*ctx.layouts)[unit].tensors()) {
    const size_t lo = std::max(range.begin, tensor.offset);
    const size_t hi = std::min(range.end, tensor.offset + tensor.numel);
    if (lo >= hi) continue;
    AdamParams tensor_params = params;
    if (!tensor.weight_decay) tensor_params.weight_decay = 0.0f;
    const size_t s = lo - state_offset;
    RETURN_IF_ERROR(ops.AdamW(stream, At(param_base, lo - range.begin, element_bytes),
                              state.master + s, state.grads + s, state.exp_avg + s,
                              state.exp_avg_sq + s, hi - lo, tensor_params));
  }
  return absl::OkStatus();
}

// Accumulates the time between two points of a stream (the AdamW sub-steps).
class StreamTimer {
 public:
  void Start(Stream& stream) {
    stream.EnqueueHost([this] {
      start_ = std::chrono::steady_clock::now();
      return absl::OkStatus();
    });
  }
  void Stop(Stream& stream) {
    stream.EnqueueHost([this] {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - start_)
                          .count();
      total_us_.fetch_add(us, std::memory_order_relaxed);
      return absl::OkStatus();
    });
  }
  double ms() const { return total_us_.load(std::memory_order_relaxed) / 1000.0; }

 private:
  std::chrono::steady_clock::time_point start_;  // touched by the stream's work only
  std::atomic<int64_t> total_us_{0};
};

// ---------------------------------------------------------------- gradient homes

// A unit's resident fp32 sums (grad_accum, any tier) out to host memory, blocking.
Status CopySumsOut(const HomeContext& ctx, int unit, float* out) {
  const Buffer& sums = (*ctx.units)[unit].grad_accum;
  RETURN_IF_ERROR(ctx.device->CopyAsync(out, sums.data(), sums.bytes(), *ctx.compute));
  return ctx.compute->Synchronize();
}

// Sums on the stream that produced the reduced gradient (comm), in device memory.
class DeviceGradHome : public GradHome {
 public:
  DeviceGradHome(const HomeContext& ctx, std::vector<std::unique_ptr<Event>> ready,
                 std::unique_ptr<Event> join)
      : ctx_(ctx), ready_(std::move(ready)), join_(std::move(join)) {}
  Tier tier() const override { return Tier::kDevice; }

  StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) override {
    UnitState& state = (*ctx_.units)[unit];
    const size_t n = state.grad_accum.bytes() / sizeof(float);
    RETURN_IF_ERROR(ctx_.ops->AccumulateToFloat(producer, state.grad_accum.as<float>(), src, n));
    RETURN_IF_ERROR(ctx_.device->Record(*ready_[unit], producer));
    return &producer;
  }

  Status Zero() override {
    // Readers: the optimizer on compute, or the copy to a host optimizer.
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.compute, *join_));
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.comm, *ctx_.copy, *join_));
    for (UnitState& state : *ctx_.units) {
      RETURN_IF_ERROR(ctx_.device->MemsetAsync(state.grad_accum.data(), 0,
                                               state.grad_accum.bytes(), *ctx_.comm));
    }
    return absl::OkStatus();
  }

  Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) override {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.compute, *ready_[unit]));
    return ctx_.ops->SumSquares(*ctx_.compute, out_device,
                                (*ctx_.units)[unit].grad_accum.as<float>() + first, n);
  }

  Event& ready(int unit) override { return *ready_[unit]; }
  Status ReadSums(int unit, float* out) override { return CopySumsOut(ctx_, unit, out); }

 private:
  HomeContext ctx_;
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
};

// Reduced gradients copied to the host as they come, summed there by the CPU kernels.
class HostGradHome : public GradHome {
 public:
  HostGradHome(const HomeContext& ctx, std::vector<std::unique_ptr<Event>> ready,
               std::unique_ptr<Event> join, std::unique_ptr<Event> zeroed, Buffer norms,
               Buffer range_norms)
      : ctx_(ctx), ready_(std::move(ready)), join_(std::move(join)), zeroed_(std::move(zeroed)),
        norms_(std::move(norms)), range_norms_(std::move(range_norms)),
        first_(ctx.units->size(), true), zeroed_early_(ctx.units->size(), false) {}
  Tier tier() const override { return Tier::kHost; }

  StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) override {
    const size_t n = (*ctx_.units)[unit].grad_accum.bytes() / sizeof(float);
    RETURN_IF_ERROR(AddRanges(unit, src, {{0, n}}, producer, /*last_part=*/true));
    return ctx_.copy;  // the last reader of `src`
  }

  Status Zero() override {
    // Each unit's sum starts over at its first Add; the copy that lands there waits for
    // the host stream (the previous step's CPU optimizer, which read the sums).
    first_.assign(ctx_.units->size(), true);
    RETURN_IF_ERROR(ctx_.device->Record(*zeroed_, *ctx_.host));
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.copy, *zeroed_));
    return absl::OkStatus();
  }

  Status AddRanges(int unit, const void* src,
                   const std::vector<ShardRange>& ranges, Stream& producer,
                   bool last_part) override {
    UnitState& state = (*ctx_.units)[unit];
    Stream& copy = *ctx_.copy;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    // The landing buffer is free once the previous micro-batch's sum has read it (and the
    // sum itself once the previous step's optimizer has: Zero orders that).
    RETURN_IF_ERROR(ctx_.device->Wait(copy, *ready_[unit]));
    RETURN_IF_ERROR(Join(*ctx_.device, copy, producer, *join_));
    const bool first = first_[unit];
    if (last_part) first_[unit] = false;
    float* sum = state.grad_accum.as<float>();
    if (first && ctx_.dtype == DType::kF32) {
      // The step's first fp32 gradient lands as the sum itself (0 + x == x): one pass over
      // host memory fewer where the unit's last gradient is the one backward ends on.
      for (const ShardRange& range : ranges) {
        RETURN_IF_ERROR(ctx_.device->CopyAsync(
            sum + range.begin, static_cast<const float*>(src) + range.begin,
            (range.end - range.begin) * sizeof(float), copy));
      }
      return ctx_.device->Record(*ready_[unit], copy);
    }
    if (first && !zeroed_early_[unit]) {
      zeroed_early_[unit] = true;  // both parts sum into it: zero it once
      RETURN_IF_ERROR(ZeroOnHost(state));
    }
    if (last_part) zeroed_early_[unit] = false;
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(
          ctx_.device->CopyAsync(At(state.grad_landing.data(), range.begin, element_bytes),
                                 At(const_cast<void*>(src), range.begin, element_bytes),
                                 (range.end - range.begin) * element_bytes, copy));
    }
    RETURN_IF_ERROR(Join(*ctx_.device, *ctx_.host, copy, *join_));
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(ctx_.host_ops->AccumulateToFloat(
          *ctx_.host, sum + range.begin, At(state.grad_landing.data(), range.begin, element_bytes),
          range.end - range.begin));
    }
    return ctx_.device->Record(*ready_[unit], *ctx_.host);
  }

  Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                           float* out_device) override {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    // Its own slot (a unit's early and late parts may both be pending on the stream).
    float* partial = range_norms_.as<float>() + (range_norm_uses_++ % 2) * ctx_.units->size() +
                     unit;
    const float* sum = (*ctx_.units)[unit].grad_accum.as<float>();
    // One part per range, then their sum in range order (the parts live until then).
    auto parts = std::make_shared<std::vector<float>>(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      RETURN_IF_ERROR(ctx_.host_ops->SumSquares(*ctx_.host, parts->data() + i,
                                                sum + ranges[i].begin,
                                                ranges[i].end - ranges[i].begin));
    }
    ctx_.host->EnqueueHost([partial, parts] {
      double total = 0.0;
      for (float part : *parts) total += part;
      *partial = static_cast<float>(total);
      return absl::OkStatus();
    });
    return ctx_.device->CopyAsync(out_device, partial, sizeof(float), *ctx_.host);
  }

  Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) override {
    float* partial = norms_.as<float>() + unit;
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    RETURN_IF_ERROR(ctx_.host_ops->SumSquares(
        *ctx_.host, partial, (*ctx_.units)[unit].grad_accum.as<float>() + first, n));
    return ctx_.device->CopyAsync(out_device, partial, sizeof(float), *ctx_.host);
  }

  Event& ready(int unit) override { return *ready_[unit]; }
  Status ReadSums(int unit, float* out) override {
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    return CopySumsOut(ctx_, unit, out);
  }

 private:
  // A unit's sum zeroed in host-stream order (before the host stream sums into it).
  Status ZeroOnHost(UnitState& state) {
    void* data = state.grad_accum.data();
    const size_t bytes = state.grad_accum.bytes();
    ctx_.host->EnqueueHost([data, bytes] {
      std::memset(data, 0, bytes);
      return absl::OkStatus();
    });
    return absl::OkStatus();
  }

  HomeContext ctx_;
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
  std::unique_ptr<Event> zeroed_;  // Zero's point on the host stream
  Buffer norms_;  // [units] fp32 partial sums, host tier
  Buffer range_norms_;  // [2][units]: SquaredNormRanges' partial sums, alternating
  size_t range_norm_uses_ = 0;
  std::vector<bool> first_;  // per unit: no Add since Zero
  std::vector<bool> zeroed_early_;  // per unit: zeroed by the first part of AddRanges
};

// Gradient sums in the NVMe tier, chunk by chunk through a few host slots (see
// GradHome::CreateNvme). Per chunk of an Add: landing <- reduced gradient (copy stream);
// sum <- the sum so far, read back (not on the step's first Add); sum += landing and its
// squares summed (host stream); sum written back once that has run. The extents' order in
// the tier puts the optimizer's later read of a chunk after this write.
constexpr int kSummedEventsPerSlot = 4;

class NvmeGradHome : public GradHome {
 public:
  struct Slot {
    Buffer sum;      // fp32, the largest chunk's padded extent
    Buffer landing;  // compute dtype, the largest chunk's elements
    RotatingEvents summed;  // the sum done (host stream), one per use
    // Once done, the sum buffer may be refilled: its last write-back, or the write-back
    // of the optimizer's sub-step that took its kept sum.
    NvmeTier::Ticket write = 0;
    int kept_unit = -1;      // a final sum kept here for the optimizer (KeepFinalSums)
    size_t kept_chunk = 0;   // its chunk index in the unit
    size_t kept_use = 0;     // its `summed` event
  };

  NvmeGradHome(const HomeContext& ctx, NvmeTier* nvme, std::vector<std::vector<NvmeChunk>> chunks,
               std::vector<Slot> slots, std::vector<std::unique_ptr<Event>> ready,
               std::unique_ptr<Event> join, Buffer norms)
      : ctx_(ctx), nvme_(nvme), chunks_(std::move(chunks)), slots_(std::move(slots)),
        ready_(std::move(ready)), join_(std::move(join)), norms_(std::move(norms)),
        first_(ctx.units->size(), true) {
    for (const auto& unit_chunks : chunks_) {
      partials_.emplace_back(unit_chunks.size(), 0.0f);
      kept_.emplace_back(unit_chunks.size(), -1);
      handed_over_.emplace_back(unit_chunks.size(), false);
    }
  }

  ~NvmeGradHome() override {
    // Write-backs read the slots: they must be out before the slots go.
    nvme_->Drain().IgnoreError();
  }

  Tier tier() const override { return Tier::kHost; }
  bool on_nvme() const override { return true; }

  StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) override {
    Device& device = *ctx_.device;
    Stream& copy = *ctx_.copy;
    Stream& host = *ctx_.host;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    const bool fp32 = ctx_.dtype == DType::kF32;
    const bool first = first_[unit];
    first_[unit] = false;
    RETURN_IF_ERROR(Join(device, copy, producer, *join_));
    for (size_t k = 0; k < chunks_[unit].size(); ++k) {
      const NvmeChunk& chunk = chunks_[unit][k];
      const size_t n = chunk.end - chunk.begin;
      const size_t slot_index = next_slot_++ % slots_.size();
      Slot& slot = slots_[slot_index];
      WriteKept(slot);  // a sum kept here and not taken goes out before the buffer is reused
      ASSIGN_OR_RETURN(const size_t use, slot.summed.Next());
      // The landing buffer is free once the slot's previous sum has read it.
      if (Event* previous = slot.summed.previous(use)) {
        RETURN_IF_ERROR(device.Wait(copy, *previous));
      }
      RETURN_IF_ERROR(device.CopyAsync(slot.landing.data(),
                                       At(const_cast<void*>(src), chunk.begin, element_bytes),
                                       n * element_bytes, copy));
      RETURN_IF_ERROR(Join(device, host, copy, *join_));
      // The sum buffer is free once its last write-back is out; the sum so far is read
      // into it after that (the I/O thread orders it).
      const NvmeTier::Ticket read =
          first ? 0 : nvme_->ReadAfter(chunk.id, {{ExtentKind::kGrads, slot.sum.data()}},
                                       slot.write);
      NvmeTier* nvme = nvme_;
      const NvmeTier::Ticket wait_for = first ? slot.write : read;
      float* sum = slot.sum.as<float>();
      const void* landing = slot.landing.data();
      const bool copy_in = first && fp32;  // 0 + x == x: the landing is the sum
      const bool zero = first && !fp32;
      host.EnqueueHost([nvme, wait_for, sum, landing, n, copy_in, zero] {
        if (wait_for != 0) RETURN_IF_ERROR(nvme->Wait(wait_for));
        if (copy_in) std::memcpy(sum, landing, n * sizeof(float));
        if (zero) std::memset(sum, 0, n * sizeof(float));
        return absl::OkStatus();
      });
      if (!copy_in) RETURN_IF_ERROR(ctx_.host_ops->AccumulateToFloat(host, sum, landing, n));
      RETURN_IF_ERROR(ctx_.host_ops->SumSquares(host, partials_[unit].data() + k, sum, n));
      Event& summed = slot.summed[use];
      RETURN_IF_ERROR(device.Record(summed, host));
      handed_over_[unit][k] = false;
      if (keep_) {
        slot.kept_unit = unit;
        slot.kept_chunk = k;
        slot.kept_use = use;
        kept_[unit][k] = static_cast<int>(slot_index);
      } else {
        slot.write =
            nvme_->WriteAfter(chunk.id, {{ExtentKind::kGrads, slot.sum.data()}}, &summed);
        slot.summed.Hold(use, nvme_, slot.write);
      }
    }
    RETURN_IF_ERROR(device.Record(*ready_[unit], host));
    return ctx_.copy;  // the last reader of `src`
  }

  Status Zero() override {
    // The next Add of each unit starts its sum over (the tier orders its write-back after
    // every read of the extent posted before it, the optimizer's included).
    first_.assign(ctx_.units->size(), true);
    return KeepFinalSums(false);
  }

  Status KeepFinalSums(bool keep) override {
    keep_ = keep;
    if (!keep) {
      for (Slot& slot : slots_) WriteKept(slot);
    }
    return absl::OkStatus();
  }

  const float* KeptSum(int unit, size_t k) override {
    const int slot = kept_[unit][k];
    return slot < 0 ? nullptr : slots_[slot].sum.as<float>();
  }

  void ReleaseKeptSum(int unit, size_t k, NvmeTier::Ticket after) override {
    Slot& slot = slots_[kept_[unit][k]];
    kept_[unit][k] = -1;
    handed_over_[unit][k] = true;
    slot.kept_unit = -1;
    slot.write = after;
  }

  Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) override {
    if (first != 0 || n != (*ctx_.units)[unit].shard_elements) {
      return absl::InternalError("nvme gradient home: a norm covers the unit's whole shard");
    }
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    // The chunks' parts of the last Add, summed in chunk order.
    const float* parts = partials_[unit].data();
    const size_t count = partials_[unit].size();
    float* out = norms_.as<float>() + unit;
    ctx_.host->EnqueueHost([parts, count, out] {
      double total = 0.0;
      for (size_t k = 0; k < count; ++k) total += parts[k];
      *out = static_cast<float>(total);
      return absl::OkStatus();
    });
    return ctx_.device->CopyAsync(out_device, out, sizeof(float), *ctx_.host);
  }

  Event& ready(int unit) override { return *ready_[unit]; }

  Status ReadSums(int unit, float* out) override {
    for (bool handed_over : handed_over_[unit]) {
      if (handed_over) {
        return absl::FailedPreconditionError(absl::StrCat(
            "unit ", (*ctx_.layouts)[unit].name(), ": its gradient sums went to the optimizer's "
            "sub-step in memory and were never stored; read gradients before a step"));
      }
    }
    RETURN_IF_ERROR(KeepFinalSums(false));
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    RETURN_IF_ERROR(nvme_->Drain());
    Slot& slot = slots_[0];
    for (const NvmeChunk& chunk : chunks_[unit]) {
      RETURN_IF_ERROR(
          nvme_->Wait(nvme_->Read(chunk.id, {{ExtentKind::kGrads, slot.sum.data()}})));
      std::memcpy(out + chunk.begin, slot.sum.data(), (chunk.end - chunk.begin) * sizeof(float));
    }
    return absl::OkStatus();
  }

 private:
  HomeContext ctx_;
  NvmeTier* nvme_;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
  Buffer norms_;  // [units] fp32, host tier
  std::vector<bool> first_;  // per unit: no Add since Zero
  std::vector<std::vector<float>> partials_;  // per unit, per chunk: sum of squares
  bool keep_ = false;  // KeepFinalSums
  std::vector<std::vector<int>> kept_;  // per unit, per chunk: slot keeping its sum, or -1
  // Per unit, per chunk: its sum of the last Add went to the optimizer without a write.
  std::vector<std::vector<bool>> handed_over_;

  // The slot's kept sum, if any, is written out (its chunk's sum is then read from the
  // tier like any other).
  void WriteKept(Slot& slot) {
    if (slot.kept_unit < 0) return;
    const NvmeChunk& chunk = chunks_[slot.kept_unit][slot.kept_chunk];
    slot.write = nvme_->WriteAfter(chunk.id, {{ExtentKind::kGrads, slot.sum.data()}},
                                   &slot.summed[slot.kept_use]);
    slot.summed.Hold(slot.kept_use, nvme_, slot.write);
    kept_[slot.kept_unit][slot.kept_chunk] = -1;
    slot.kept_unit = -1;
  }
};

// ---------------------------------------------------------------- optimizer homes

// Master out of / into a unit's state buffers (any tier), through the compute stream.
Status CopyStateOut(const HomeContext& ctx, int unit, float* master, float* exp_avg,
                    float* exp_avg_sq) {
  const UnitState& state = (*ctx.units)[unit];
  const std::pair<float*, const Buffer*> arrays[] = {
      {master, &state.master}, {exp_avg, &state.exp_avg}, {exp_avg_sq, &state.exp_avg_sq}};
  for (const auto& [out, buffer] : arrays) {
    if (out == nullptr) continue;
    RETURN_IF_ERROR(ctx.device->CopyAsync(out, buffer->data(), buffer->bytes(), *ctx.compute));
  }
  return ctx.compute->Synchronize();
}

Status Zero(const HomeContext& ctx, Buffer& buffer) {
  if (buffer.tier() == Tier::kHost) {
    std::memset(buffer.data(), 0, buffer.bytes());
    return absl::OkStatus();
  }
  return ctx.device->MemsetAsync(buffer.data(), 0, buffer.bytes(), *ctx.compute);
}

Status CopyStateIn(const HomeContext& ctx, int unit, const float* master,
                   const float* exp_avg, const float* exp_avg_sq) {
  UnitState& state = (*ctx.units)[unit];
  const std::pair<const float*, Buffer*> arrays[] = {
      {master, &state.master}, {exp_avg, &state.exp_avg}, {exp_avg_sq, &state.exp_avg_sq}};
  for (const auto& [values, buffer] : arrays) {
    if (values == nullptr) {
      RETURN_IF_ERROR(Zero(ctx, *buffer));
    } else {
      RETURN_IF_ERROR(
          ctx.device->CopyAsync(buffer->data(), values, buffer->bytes(), *ctx.compute));
    }
  }
  return ctx.compute->Synchronize();
}

// The homes whose state sits in a memory tier (device or host): the master is read and
// written through the compute stream; the AdamW sub-steps run (and are waited for) on
// `stream`.
class ResidentOptimizerHome : public OptimizerHome {
 public:
  ResidentOptimizerHome(const HomeContext& ctx, GradHome* grads,
                        std::vector<std::unique_ptr<Event>> ready, Stream* stream)
      : ctx_(ctx), grads_(grads), ready_(std::move(ready)), stream_(stream) {}
  Event& params_ready(int unit) override { return *ready_[unit]; }
  Status WaitSteps() override { return stream_->Synchronize(); }
  double busy_ms() const override { return timer_.ms(); }
  Status LoadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) override {
    return CopyStateOut(ctx_, unit, master, exp_avg, exp_avg_sq);
  }
  Status StoreState(int unit, const float* master, const float* exp_avg,
                    const float* exp_avg_sq) override {
    return CopyStateIn(ctx_, unit, master, exp_avg, exp_avg_sq);
  }

 protected:
  HomeContext ctx_;
  GradHome* grads_;
  std::vector<std::unique_ptr<Event>> ready_;  // params in place
  Stream* stream_;
  StreamTimer timer_;
};

// AdamW with the backend's kernels on the compute stream.
class DeviceOptimizerHome : public ResidentOptimizerHome {
 public:
  DeviceOptimizerHome(const HomeContext& ctx, GradHome* grads,
                      std::vector<std::unique_ptr<Event>> ready)
      : ResidentOptimizerHome(ctx, grads, std::move(ready), ctx.compute) {}
  Tier tier() const override { return Tier::kDevice; }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest, Tier param_tier) override {
    if (param_tier != Tier::kDevice) {
      return absl::FailedPreconditionError(
          "an optimizer on the device writes params in the device tier only "
          "(zero.param_tier=host needs zero.optimizer_tier=host)");
    }
    Stream& compute = *ctx_.compute;
    RETURN_IF_ERROR(ctx_.device->Wait(compute, grads_->ready(unit)));
    timer_.Start(compute);
    UnitState& state = (*ctx_.units)[unit];
    RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.ops, compute, unit, params, range, state_offset,
                                  StateOf(state, state.grad_accum.as<float>()), param_dest));
    timer_.Stop(compute);
    return ctx_.device->Record(*ready_[unit], compute);
  }
};

// The SIMD CPU Adam on the host stream; params copied to the device on the copy stream.
class HostOptimizerHome : public ResidentOptimizerHome {
 public:
  HostOptimizerHome(const HomeContext& ctx, GradHome* grads,
                    std::vector<std::unique_ptr<Event>> stepped,
                    std::vector<std::unique_ptr<Event>> ready, std::unique_ptr<Event> join)
      : ResidentOptimizerHome(ctx, grads, std::move(ready), ctx.host),
        stepped_(std::move(stepped)), join_(std::move(join)) {}
  Tier tier() const override { return Tier::kHost; }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest, Tier param_tier) override {
    if (param_tier == Tier::kHost) {
      RETURN_IF_ERROR(Update(unit, params, {range}, state_offset, param_dest, range.begin));
      return ctx_.device->Record(*ready_[unit], *ctx_.host);
    }
    RETURN_IF_ERROR(StepStaged(unit, params, range, state_offset));
    return Publish(unit, {range}, param_dest, range.begin, nullptr);
  }

  Status StepStaged(int unit, const AdamParams& params, ShardRange range,
                    size_t state_offset) override {
    return UpdateStaged(unit, params, {range}, state_offset);
  }

  Status PublishStaged(int unit, ShardRange range, void* param_dest, Stream& after) override {
    return Publish(unit, {range}, param_dest, range.begin, &after);
  }

  Status StepRanges(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                    size_t state_offset, void* param_dest) override {
    RETURN_IF_ERROR(UpdateStaged(unit, params, ranges, state_offset));
    return Publish(unit, ranges, param_dest, state_offset, nullptr);
  }

 private:
  // The AdamW over `ranges` on the host stream, each range's params to `out` + (its begin
  // - `out_origin`) elements (host memory); records stepped_.
  Status Update(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                size_t state_offset, void* out, size_t out_origin) {
    UnitState& state = (*ctx_.units)[unit];
    Device& device = *ctx_.device;
    Stream& host = *ctx_.host;
    Stream& copy = *ctx_.copy;
    const float* grads = state.grad_accum.as<float>();
    if (grads_->tier() != Tier::kHost) {
      // Sums made on the device: copy this step's to the host first (after the previous
      // step's AdamW is done with the staging buffer).
      RETURN_IF_ERROR(device.Wait(copy, *stepped_[unit]));
      RETURN_IF_ERROR(device.Wait(copy, grads_->ready(unit)));
      RETURN_IF_ERROR(device.CopyAsync(state.grad_staging.data(), state.grad_accum.data(),
                                       state.grad_staging.bytes(), copy));
      RETURN_IF_ERROR(Join(device, host, copy, *join_));
      grads = state.grad_staging.as<float>();
    } else {
      RETURN_IF_ERROR(device.Wait(host, grads_->ready(unit)));
    }
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    timer_.Start(host);
    for (const ShardRange& range : ranges) {
      RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.host_ops, host, unit, params, range,
                                    state_offset, StateOf(state, grads),
                                    At(out, range.begin - out_origin, element_bytes)));
    }
    timer_.Stop(host);
    return device.Record(*stepped_[unit], host);
  }

  // Update into the param staging buffer (from the state offset on), once the unit's
  // previous copy out of it is done.
  Status UpdateStaged(int unit, const AdamParams& params, const std::vector<ShardRange>& ranges,
                      size_t state_offset) {
    RETURN_IF_ERROR(ctx_.device->Wait(*ctx_.host, *ready_[unit]));
    return Update(unit, params, ranges, state_offset, (*ctx_.units)[unit].param_staging.data(),
                  state_offset);
  }

  // The staged params of `ranges` to `param_dest` + (range begin - `origin`) elements on
  // the copy stream, after the unit's last Update and after `after` (if any) has passed
  // what it has enqueued so far; records ready_. `origin` is also where the staging
  // buffer starts (the callers' ranges start at their state offset).
  Status Publish(int unit, const std::vector<ShardRange>& ranges, void* param_dest,
                 size_t origin, Stream* after) {
    Device& device = *ctx_.device;
    Stream& copy = *ctx_.copy;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    void* staging = (*ctx_.units)[unit].param_staging.data();
    if (after != nullptr) RETURN_IF_ERROR(Join(device, copy, *after, *join_));
    RETURN_IF_ERROR(device.Wait(copy, *stepped_[unit]));
    for (const ShardRange& range : ranges) {
      const size_t at = range.begin - origin;
      RETURN_IF_ERROR(device.CopyAsync(At(param_dest, at, element_bytes),
                                       At(staging, at, element_bytes),
                                       (range.end - range.begin) * element_bytes, copy));
    }
    return device.Record(*ready_[unit], copy);
  }

  std::vector<std::unique_ptr<Event>> stepped_;  // AdamW of the unit done (host stream)
  std::unique_ptr<Event> join_;
};

// ZeRO-Infinity: the state lives in the NVMe tier, chunk by chunk; a chunk's sub-step runs
// through one of a few host slots: read (master, m, v) -> CPU Adam on the host stream ->
// write back (and the params: copied to the device, or written to nvme). Chunks enqueued
// one after the other overlap: chunk k+1 is read while k is stepped and k-1 written back.
// At the end of a step every slot is given a read of the chunk it will take first in the
// next step (same order as this one), so the disk works during the next forward instead
// of waiting for the first gradients.
constexpr int kSteppedEventsPerSlot = 8;

class NvmeOptimizerHome : public OptimizerHome {
 public:
  struct Slot {
    Buffer master, exp_avg, exp_avg_sq, grads, params;
    RotatingEvents stepped;  // AdamW done (host stream), one per use
    std::unique_ptr<Event> copied;   // params copied out to the device (copy stream)
    NvmeTier::Ticket write_back = 0;        // the last one
    NvmeTier::Ticket param_write_back = 0;  // the last one, in the params' tier
    int prefetched = -1;             // chunk whose state a read ahead brings, or -1
    NvmeTier::Ticket prefetch = 0;
  };

  NvmeOptimizerHome(const HomeContext& ctx, GradHome* grads, NvmeTier* nvme,
                    NvmeTier* param_nvme, std::vector<std::vector<NvmeChunk>> chunks,
                    std::vector<Slot> slots, std::vector<std::unique_ptr<Event>> ready,
                    std::unique_ptr<Event> join)
      : ctx_(ctx), grads_(grads), nvme_(nvme), param_nvme_(param_nvme),
        params_on_nvme_(param_nvme != nullptr),
        chunks_(std::move(chunks)), slots_(std::move(slots)), ready_(std::move(ready)),
        join_(std::move(join)) {}

  ~NvmeOptimizerHome() override {
    // Write-backs read the slots: they must be done before the slots go.
    nvme_->Drain().IgnoreError();
    if (param_nvme_) param_nvme_->Drain().IgnoreError();
  }

  Tier tier() const override { return Tier::kHost; }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest, Tier param_tier) override {
    if (range.begin != state_offset ||
        range.end - range.begin != (*ctx_.units)[unit].shard_elements) {
      return absl::InternalError("nvme optimizer: a sub-step must cover one owned shard");
    }
    const bool to_device = !params_on_nvme_ && param_tier != Tier::kHost;
    for (size_t k = 0; k < chunks_[unit].size(); ++k) {
      RETURN_IF_ERROR(StepChunk(unit, k, params, range.begin, param_dest, to_device));
    }
    return ctx_.device->Record(*ready_[unit], to_device ? *ctx_.copy : *ctx_.host);
  }

  Event& params_ready(int unit) override { return *ready_[unit]; }

  Status WaitSteps() override {
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    // Read ahead for the next step: slot next_slot_ + i will take chunk order_[i] first.
    for (size_t i = 0; i < std::min(slots_.size(), order_.size()); ++i) {
      Slot& slot = slots_[(next_slot_ + i) % slots_.size()];
      if (slot.prefetched >= 0) continue;
      slot.prefetch = nvme_->ReadAfter(order_[i],
                                       {{ExtentKind::kMaster, slot.master.data()},
                                        {ExtentKind::kExpAvg, slot.exp_avg.data()},
                                        {ExtentKind::kExpAvgSq, slot.exp_avg_sq.data()}},
                                       slot.write_back);
      slot.prefetched = order_[i];
    }
    order_.clear();
    return absl::OkStatus();
  }

  double busy_ms() const override { return timer_.ms(); }

  // Chunk by chunk through slot 0's buffers (only the kinds asked for are read).
  Status LoadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) override {
    Slot& slot = slots_[0];
    RETURN_IF_ERROR(Flush());
    const std::tuple<ExtentKind, float*, Buffer*> arrays[] = {
        {ExtentKind::kMaster, master, &slot.master},
        {ExtentKind::kExpAvg, exp_avg, &slot.exp_avg},
        {ExtentKind::kExpAvgSq, exp_avg_sq, &slot.exp_avg_sq}};
    for (const NvmeChunk& chunk : chunks_[unit]) {
      std::vector<NvmeTier::Part> parts;
      for (const auto& [kind, out, buffer] : arrays) {
        if (out != nullptr) parts.push_back({kind, buffer->data()});
      }
      if (parts.empty()) break;
      RETURN_IF_ERROR(nvme_->Wait(nvme_->Read(chunk.id, std::move(parts))));
      for (const auto& [kind, out, buffer] : arrays) {
        if (out == nullptr) continue;
        std::memcpy(out + chunk.begin, buffer->data(), (chunk.end - chunk.begin) * 4);
      }
    }
    return absl::OkStatus();
  }

  Status StoreState(int unit, const float* master, const float* exp_avg,
                    const float* exp_avg_sq) override {
    if (master == nullptr) return absl::InvalidArgumentError("StoreState needs a master");
    Slot& slot = slots_[0];
    RETURN_IF_ERROR(Flush());
    const std::pair<const float*, Buffer*> arrays[] = {
        {master, &slot.master}, {exp_avg, &slot.exp_avg}, {exp_avg_sq, &slot.exp_avg_sq}};
    for (const NvmeChunk& chunk : chunks_[unit]) {
      for (const auto& [values, buffer] : arrays) {
        std::memset(buffer->data(), 0, buffer->bytes());
        if (values != nullptr) {
          std::memcpy(buffer->data(), values + chunk.begin, (chunk.end - chunk.begin) * 4);
        }
      }
      RETURN_IF_ERROR(nvme_->Wait(nvme_->Write(chunk.id,
                                               {{ExtentKind::kMaster, slot.master.data()},
                                                {ExtentKind::kExpAvg, slot.exp_avg.data()},
                                                {ExtentKind::kExpAvgSq, slot.exp_avg_sq.data()}})));
    }
    return absl::OkStatus();
  }

  Status Flush() override {
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    RETURN_IF_ERROR(ctx_.copy->Synchronize());
    Status status = nvme_->Drain();
    if (param_nvme_) status.Update(param_nvme_->Drain());
    // Reads ahead are done now; their data may go stale (StoreState): forget them.
    for (Slot& slot : slots_) slot.prefetched = -1;
    return status;
  }

 private:
  // Chunk `k` of `unit`'s shard (which starts at unit element `shard_begin`).
  Status StepChunk(int unit, size_t k, const AdamParams& params, size_t shard_begin,
                   void* param_dest, bool to_device) {
    const NvmeChunk& chunk = chunks_[unit][k];
    UnitState& state = (*ctx_.units)[unit];
    Device& device = *ctx_.device;
    Stream& host = *ctx_.host;
    Stream& copy = *ctx_.copy;
    const size_t n = chunk.end - chunk.begin;
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    // The next slot. Nothing here blocks the host thread (it has backward to enqueue):
    // the slot's earlier work is waited for by the I/O thread (the read is posted after
    // the slot's last write-back or read ahead) and by the streams (events).
    Slot& slot = slots_[next_slot_++ % slots_.size()];
    order_.push_back(chunk.id);
    ASSIGN_OR_RETURN(const size_t use, slot.stepped.Next());
    Event& stepped = slot.stepped[use];
    NvmeTier::Ticket load = 0;
    if (slot.prefetched == chunk.id) {
      load = slot.prefetch;  // read ahead, after the slot's last write-back
    } else {
      // After whatever last wrote into the slot's state buffers or read them out: a read
      // ahead of another chunk (itself after the write-back), or the write-back.
      const NvmeTier::Ticket after = slot.prefetched >= 0 ? slot.prefetch : slot.write_back;
      load = nvme_->ReadAfter(chunk.id,
                              {{ExtentKind::kMaster, slot.master.data()},
                               {ExtentKind::kExpAvg, slot.exp_avg.data()},
                               {ExtentKind::kExpAvgSq, slot.exp_avg_sq.data()}},
                              after);
    }
    slot.prefetched = -1;
    const float* grads = state.grad_accum.as<float>() + chunk.begin;
    NvmeTier::Ticket grad_load = 0;
    const float* kept = grads_->on_nvme() ? grads_->KeptSum(unit, k) : nullptr;
    if (kept != nullptr) {
      grads = kept;  // summed on the host stream, before this AdamW
    } else if (grads_->on_nvme()) {
      // The chunk's gradient sum, after the slot's previous AdamW (which read the slot's
      // grads; its write-back follows it); the tier orders it after the sum's write-back.
      grad_load = nvme_->ReadAfter(chunk.id, {{ExtentKind::kGrads, slot.grads.data()}},
                                   slot.write_back);
      RETURN_IF_ERROR(device.Wait(host, grads_->ready(unit)));
      grads = slot.grads.as<float>();
    } else if (grads_->tier() != Tier::kHost) {
      if (Event* previous = slot.stepped.previous(use)) {  // its AdamW read the grads
        RETURN_IF_ERROR(device.Wait(copy, *previous));
      }
      RETURN_IF_ERROR(device.Wait(copy, grads_->ready(unit)));
      RETURN_IF_ERROR(device.CopyAsync(slot.grads.data(), grads, n * sizeof(float), copy));
      RETURN_IF_ERROR(Join(device, host, copy, *join_));
      grads = slot.grads.as<float>();
    } else {
      RETURN_IF_ERROR(device.Wait(host, grads_->ready(unit)));
    }
    // The AdamW overwrites the slot's params: after their copy to the device and their
    // write-back (both made from the slot's previous chunk) are done.
    RETURN_IF_ERROR(device.Wait(host, *slot.copied));
    NvmeTier* nvme = nvme_;
    NvmeTier* param_nvme = param_nvme_;
    const NvmeTier::Ticket param_write_back = slot.param_write_back;
    host.EnqueueHost([nvme, load, grad_load, param_nvme, param_write_back] {
      Status status = nvme->Wait(load);
      if (grad_load != 0) status.Update(nvme->Wait(grad_load));
      if (param_write_back != 0) status.Update(param_nvme->Wait(param_write_back));
      return status;
    });
    void* out = params_on_nvme_ || to_device ? slot.params.data()
                                             : At(param_dest, chunk.begin, element_bytes);
    const ShardRange range{shard_begin + chunk.begin, shard_begin + chunk.end};
    timer_.Start(host);
    RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.host_ops, host, unit, params, range, range.begin,
                                  {slot.master.as<float>(), grads, slot.exp_avg.as<float>(),
                                   slot.exp_avg_sq.as<float>()},
                                  out));
    timer_.Stop(host);
    RETURN_IF_ERROR(device.Record(stepped, host));
    // The write-back takes its place in the extents' order now (before any later read of
    // them), and starts once the AdamW has run.
    std::vector<NvmeTier::Part> parts = {{ExtentKind::kMaster, slot.master.data()},
                                         {ExtentKind::kExpAvg, slot.exp_avg.data()},
                                         {ExtentKind::kExpAvgSq, slot.exp_avg_sq.data()}};
    slot.write_back = nvme_->WriteAfter(chunk.id, std::move(parts), &stepped);
    slot.stepped.Hold(use, nvme_, slot.write_back);
    // The kept sum's buffer is free once that write-back (after this AdamW) is out.
    if (kept != nullptr) grads_->ReleaseKeptSum(unit, k, slot.write_back);
    if (params_on_nvme_) {
      slot.param_write_back = param_nvme_->WriteAfter(
          chunk.id, {{ExtentKind::kParams, slot.params.data()}}, &stepped);
      slot.stepped.Hold(use, param_nvme_, slot.param_write_back);
    }
    if (!to_device) return absl::OkStatus();
    RETURN_IF_ERROR(device.Wait(copy, stepped));
    RETURN_IF_ERROR(device.CopyAsync(At(param_dest, chunk.begin, element_bytes),
                                     slot.params.data(), n * element_bytes, copy));
    return device.Record(*slot.copied, copy);
  }

  HomeContext ctx_;
  GradHome* grads_;
  NvmeTier* nvme_;
  NvmeTier* param_nvme_;  // null: params not on nvme
  bool params_on_nvme_;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  std::vector<int> order_;  // chunks stepped this step, in order
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
  StreamTimer timer_;
};

}  // namespace

Status OptimizerHome::StepStaged(int, const AdamParams&, ShardRange, size_t) {
  return absl::UnimplementedError("zero.delayed_update needs the optimizer in the host tier "
                                  "(zero.optimizer_tier=host)");
}

Status OptimizerHome::StepRanges(int, const AdamParams&, const std::vector<ShardRange>&, size_t,
                                 void*) {
  return absl::UnimplementedError("stepping sub-ranges needs the optimizer in the host tier");
}

Status GradHome::SquaredNormRanges(int, const std::vector<ShardRange>&, float*) {
  return absl::UnimplementedError("norms over ranges need the sums in the host tier");
}

Status GradHome::AddRanges(int, const void*, const std::vector<ShardRange>&,
                           Stream&, bool) {
  return absl::UnimplementedError("adding gradient ranges needs the sums in the host tier");
}

Status OptimizerHome::PublishStaged(int, ShardRange, void*, Stream&) {
  return absl::UnimplementedError("zero.delayed_update needs the optimizer in the host tier "
                                  "(zero.optimizer_tier=host)");
}

namespace {

Status CheckContext(const HomeContext& ctx) {
  if (ctx.device == nullptr || ctx.ops == nullptr || ctx.host_ops == nullptr ||
      ctx.compute == nullptr || ctx.comm == nullptr || ctx.copy == nullptr ||
      ctx.host == nullptr || ctx.layouts == nullptr || ctx.units == nullptr) {
    return absl::InvalidArgumentError("a state home needs a device, both kernel sets, four "
                                      "streams, the layouts and the unit state");
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<Buffer> AllocateZeroedIn(const HomeContext& ctx, Tier tier, StateKind kind,
                                  size_t bytes, const std::string& what) {
  ASSIGN_OR_RETURN(Buffer buffer, ctx.device->Allocate(tier, kind, bytes, what));
  if (tier == Tier::kHost) {
    std::memset(buffer.data(), 0, bytes);
  } else {
    RETURN_IF_ERROR(ctx.device->MemsetAsync(buffer.data(), 0, bytes, *ctx.compute));
  }
  return buffer;
}

Status Join(Device& device, Stream& waiter, Stream& after, Event& event) {
  if (&waiter == &after) return absl::OkStatus();
  RETURN_IF_ERROR(device.Record(event, after));
  return device.Wait(waiter, event);
}

StatusOr<std::unique_ptr<GradHome>> GradHome::Create(const HomeContext& ctx, Tier tier) {
  RETURN_IF_ERROR(CheckContext(ctx));
  const size_t units = ctx.units->size();
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, units));
  if (tier == Tier::kDevice) {
    ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
    return std::unique_ptr<GradHome>(new DeviceGradHome(ctx, std::move(ready), std::move(join)));
  }
  for (size_t u = 0; u < units; ++u) {
    const UnitState& state = (*ctx.units)[u];
    const size_t n = state.grad_accum.bytes() / sizeof(float);
    if (state.grad_accum.tier() != Tier::kHost ||
        state.grad_landing.bytes() < n * DTypeBytes(ctx.dtype)) {
      return absl::InternalError(absl::StrCat("unit ", (*ctx.layouts)[u].name(),
                                              ": host gradient home without host buffers"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  ASSIGN_OR_RETURN(Buffer norms, ctx.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                      units * sizeof(float), "grad norm parts"));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> zeroed, ctx.device->CreateEvent());
  ASSIGN_OR_RETURN(Buffer range_norms,
                   ctx.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                        2 * units * sizeof(float), "grad norm parts of ranges"));
  return std::unique_ptr<GradHome>(new HostGradHome(ctx, std::move(ready), std::move(join),
                                                    std::move(zeroed), std::move(norms),
                                                    std::move(range_norms)));
}

StatusOr<std::unique_ptr<GradHome>> GradHome::CreateNvme(
    const HomeContext& ctx, NvmeTier* nvme, std::vector<std::vector<NvmeChunk>> chunks,
    int slots) {
  RETURN_IF_ERROR(CheckContext(ctx));
  if (nvme == nullptr || slots < 1 || chunks.size() != ctx.units->size()) {
    return absl::InvalidArgumentError(
        "an nvme gradient home needs a tier, slots and every unit's chunks");
  }
  uint64_t sum_bytes = 0, landing_bytes = 0;
  for (const auto& unit_chunks : chunks) {
    for (const NvmeChunk& chunk : unit_chunks) {
      sum_bytes = std::max(sum_bytes, nvme->PaddedBytes(chunk.id, ExtentKind::kGrads));
      landing_bytes = std::max<uint64_t>(landing_bytes,
                                         (chunk.end - chunk.begin) * DTypeBytes(ctx.dtype));
    }
  }
  if (sum_bytes == 0) return absl::InvalidArgumentError("nvme tier without gradient extents");
  std::vector<NvmeGradHome::Slot> all(slots);
  for (int i = 0; i < slots; ++i) {
    NvmeGradHome::Slot& slot = all[i];
    const std::string name = absl::StrCat("nvme gradient slot ", i);
    ASSIGN_OR_RETURN(slot.sum, AllocateZeroedIn(ctx, Tier::kHost, StateKind::kGrads, sum_bytes,
                                                name + " sum"));
    ASSIGN_OR_RETURN(slot.landing, AllocateZeroedIn(ctx, Tier::kHost, StateKind::kGrads,
                                                    landing_bytes, name + " landing"));
    RETURN_IF_ERROR(slot.summed.Create(*ctx.device, kSummedEventsPerSlot));
  }
  const size_t units = ctx.units->size();
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, units));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  ASSIGN_OR_RETURN(Buffer norms, ctx.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                      units * sizeof(float), "grad norm parts"));
  return std::unique_ptr<GradHome>(new NvmeGradHome(ctx, nvme, std::move(chunks), std::move(all),
                                                    std::move(ready), std::move(join),
                                                    std::move(norms)));
}

StatusOr<std::unique_ptr<OptimizerHome>> OptimizerHome::Create(const HomeContext& ctx,
                                                               Tier tier, GradHome* grads) {
  RETURN_IF_ERROR(CheckContext(ctx));
  if (grads == nullptr) return absl::InvalidArgumentError("an optimizer home needs a grad home");
  const size_t units = ctx.units->size();
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, units));
  if (tier == Tier::kDevice) {
    if (grads->tier() != Tier::kDevice) {
      return absl::InvalidArgumentError(
          "an optimizer on the device reads gradients on the device: set zero.grad_tier=device "
          "or zero.optimizer_tier=host");
    }
    return std::unique_ptr<OptimizerHome>(new DeviceOptimizerHome(ctx, grads, std::move(ready)));
  }
  ASSIGN_OR_RETURN(auto stepped, MakeEvents(*ctx.device, units));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  return std::unique_ptr<OptimizerHome>(new HostOptimizerHome(
      ctx, grads, std::move(stepped), std::move(ready), std::move(join)));
}

std::vector<std::vector<NvmeChunk>> NvmeChunks(const std::vector<size_t>& shard_elements,
                                              size_t chunk_elements) {
  std::vector<std::vector<NvmeChunk>> chunks(shard_elements.size());
  int id = 0;
  for (size_t u = 0; u < shard_elements.size(); ++u) {
    for (size_t begin = 0; begin < shard_elements[u]; begin += chunk_elements) {
      chunks[u].push_back({id++, begin, std::min(shard_elements[u], begin + chunk_elements)});
    }
  }
  return chunks;
}

StatusOr<std::unique_ptr<OptimizerHome>> OptimizerHome::CreateNvme(
    const HomeContext& ctx, GradHome* grads, NvmeTier* nvme,
    std::vector<std::vector<NvmeChunk>> chunks, NvmeTier* param_nvme, int slots) {
  const bool params_on_nvme = param_nvme != nullptr;
  RETURN_IF_ERROR(CheckContext(ctx));
  if (grads == nullptr || nvme == nullptr || slots < 1 || chunks.size() != ctx.units->size()) {
    return absl::InvalidArgumentError(
        "an nvme optimizer home needs grads, a tier, slots and every unit's chunks");
  }
  // Slots sized for the largest chunk's extents (4 KiB-padded for O_DIRECT).
  uint64_t state_bytes = 0, param_bytes = 4096;
  for (const auto& unit_chunks : chunks) {
    for (const NvmeChunk& chunk : unit_chunks) {
      state_bytes = std::max(state_bytes, nvme->PaddedBytes(chunk.id, ExtentKind::kMaster));
      param_bytes = std::max<uint64_t>(
          param_bytes, params_on_nvme ? param_nvme->PaddedBytes(chunk.id, ExtentKind::kParams)
                                      : (chunk.end - chunk.begin) * DTypeBytes(ctx.dtype));
    }
  }
  if (state_bytes == 0) return absl::InvalidArgumentError("nvme tier without optimizer extents");
  std::vector<NvmeOptimizerHome::Slot> all(slots);
  for (int i = 0; i < slots; ++i) {
    NvmeOptimizerHome::Slot& slot = all[i];
    const std::string name = absl::StrCat("nvme optimizer slot ", i);
    for (Buffer* buffer : {&slot.master, &slot.exp_avg, &slot.exp_avg_sq}) {
      ASSIGN_OR_RETURN(*buffer, AllocateZeroedIn(ctx, Tier::kHost, StateKind::kOptimizer,
                                                 state_bytes, name));
    }
    if (grads->tier() != Tier::kHost || grads->on_nvme()) {
      ASSIGN_OR_RETURN(slot.grads, AllocateZeroedIn(ctx, Tier::kHost, StateKind::kGrads,
                                                    state_bytes, name + " grads"));
    }
    ASSIGN_OR_RETURN(slot.params, AllocateZeroedIn(ctx, Tier::kHost, StateKind::kParams,
                                                   param_bytes, name + " params"));
    RETURN_IF_ERROR(slot.stepped.Create(*ctx.device, kSteppedEventsPerSlot));
    ASSIGN_OR_RETURN(slot.copied, ctx.device->CreateEvent());
  }
  ASSIGN_OR_RETURN(auto ready, MakeEvents(*ctx.device, ctx.units->size()));
  ASSIGN_OR_RETURN(std::unique_ptr<Event> join, ctx.device->CreateEvent());
  return std::unique_ptr<OptimizerHome>(
      new NvmeOptimizerHome(ctx, grads, nvme, param_nvme, std::move(chunks), std::move(all),
                            std::move(ready), std::move(join)));
}

}  // namespace strata
