// The NVMe gradient home; see GradHome::CreateNvme in grad_home.h.
#include <cstring>

#include "tiers/grad_home.h"
#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// Gradient sums in the NVMe tier, chunk by chunk through a few host slots (see
// GradHome::CreateNvme). Per chunk of an Add: landing <- reduced gradient (copy stream);
// sum <- the sum so far, read back (not on the step's first Add); sum += landing and its
// squares summed (host stream); sum written back once that has run. The extents' order in
// the tier puts the optimizer's later read of a chunk after this write.
constexpr int kSummedEventsPerSlot = 4;

class NvmeGradHome : public GradHome, public SumHandOver {
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

  StateTier tier() const override { return StateTier::kNvme; }
  SumHandOver* hand_over() override { return this; }

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
                                       ElementAt(const_cast<void*>(src), chunk.begin, element_bytes),
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

}  // namespace

StatusOr<std::unique_ptr<GradHome>> GradHome::CreateNvme(
    const HomeContext& ctx, NvmeTier* nvme, std::vector<std::vector<NvmeChunk>> chunks,
    int slots) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  RETURN_IF_ERROR(CheckNvmeChunks(ctx, chunks));
  if (nvme == nullptr || slots < 1) {
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

}  // namespace strata
