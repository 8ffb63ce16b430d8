// The NVMe optimizer home; see OptimizerHome::CreateNvme in optimizer_home.h.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "tiers/adam_over_range.h"
#include "tiers/optimizer_home.h"
#include "tiers/state_blocks.h"
#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// ZeRO-Infinity: the state lives in the NVMe tier, chunk by chunk; a chunk's sub-step runs
// through one of a few host slots: read (master, m, v) -> CPU Adam on the host stream ->
// write back (and the params: copied to the device, or written to nvme). Chunks enqueued
// one after the other overlap: chunk k+1 is read while k is stepped and k-1 written back.
// At the end of a step every slot is given a read of the chunk it will take first in the
// next step (same order as this one), so the disk works during the next forward instead
// of waiting for the first gradients.
// With 8-bit states (the units' state_runs set) a chunk's moment extents, and so a slot's
// exp_avg/exp_avg_sq buffers, hold the chunk's stored form of m and v (tiers/state_blocks.h:
// fp32 runs' values, codes, block absmaxes): the CPU Adam steps them in place, and the disk
// moves about a quarter of the fp32 moments' bytes.
constexpr int kSteppedEventsPerSlot = 8;

// The moment extents of a kind, and which of a unit's moments they hold.
constexpr ExtentKind kMomentKinds[2] = {ExtentKind::kExpAvg, ExtentKind::kExpAvgSq};

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
                    ParamHome* params, SumHandOver* hand_over,
                    std::vector<std::vector<NvmeChunk>> chunks,
                    std::vector<std::vector<std::vector<StateRun>>> chunk_runs,
                    std::vector<Slot> slots, std::vector<std::unique_ptr<Event>> ready,
                    std::unique_ptr<Event> join)
      : ctx_(ctx), grads_(grads), nvme_(nvme), param_write_(params->write_back()),
        param_nvme_(param_write_ != nullptr ? &param_write_->tier() : nullptr),
        params_on_nvme_(param_write_ != nullptr),
        params_to_device_(params->tier() == StateTier::kDevice), hand_over_(hand_over),
        chunks_(std::move(chunks)), chunk_runs_(std::move(chunk_runs)),
        slots_(std::move(slots)), ready_(std::move(ready)), join_(std::move(join)) {}

  ~NvmeOptimizerHome() override {
    // Write-backs read the slots: they must be done before the slots go.
    nvme_->Drain().IgnoreError();
    if (param_nvme_) param_nvme_->Drain().IgnoreError();
  }

  Tier tier() const override { return Tier::kHost; }

  Status Step(int unit, const AdamParams& params, ShardRange range, size_t state_offset,
              void* param_dest) override {
    if (range.begin != state_offset ||
        range.end - range.begin != (*ctx_.units)[unit].shard_elements) {
      return absl::InternalError("nvme optimizer: a sub-step must cover one owned shard");
    }
    const bool to_device = params_to_device_;
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

  // Chunk by chunk through slot 0's buffers (only the kinds asked for are read); 8-bit
  // moments dequantized.
  Status ReadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) override {
    Slot& slot = slots_[0];
    RETURN_IF_ERROR(Flush());
    const std::tuple<ExtentKind, float*, Buffer*> arrays[] = {
        {ExtentKind::kMaster, master, &slot.master},
        {ExtentKind::kExpAvg, exp_avg, &slot.exp_avg},
        {ExtentKind::kExpAvgSq, exp_avg_sq, &slot.exp_avg_sq}};
    for (size_t k = 0; k < chunks_[unit].size(); ++k) {
      const NvmeChunk& chunk = chunks_[unit][k];
      const std::vector<StateRun>& runs = chunk_runs_[unit][k];
      std::vector<NvmeTier::Part> parts;
      for (const auto& [kind, out, buffer] : arrays) {
        if (out != nullptr) parts.push_back({kind, buffer->data()});
      }
      if (parts.empty()) break;
      RETURN_IF_ERROR(nvme_->Wait(nvme_->Read(chunk.id, std::move(parts))));
      for (const auto& [kind, out, buffer] : arrays) {
        if (out == nullptr) continue;
        if (kind != ExtentKind::kMaster && !runs.empty()) {
          MomentToFp32(runs, kind == ExtentKind::kExpAvg, buffer->as<uint8_t>(),
                       out + chunk.begin);
        } else {
          std::memcpy(out + chunk.begin, buffer->data(), (chunk.end - chunk.begin) * 4);
        }
      }
    }
    return absl::OkStatus();
  }

  // Null moments are zeros (with 8-bit states: the codes of 0.0); 8-bit moments quantized.
  Status WriteState(int unit, const float* master, const float* exp_avg,
                    const float* exp_avg_sq) override {
    if (master == nullptr) return absl::InvalidArgumentError("WriteState needs a master");
    Slot& slot = slots_[0];
    RETURN_IF_ERROR(Flush());
    const std::tuple<ExtentKind, const float*, Buffer*> arrays[] = {
        {ExtentKind::kMaster, master, &slot.master},
        {ExtentKind::kExpAvg, exp_avg, &slot.exp_avg},
        {ExtentKind::kExpAvgSq, exp_avg_sq, &slot.exp_avg_sq}};
    for (size_t k = 0; k < chunks_[unit].size(); ++k) {
      const NvmeChunk& chunk = chunks_[unit][k];
      const std::vector<StateRun>& runs = chunk_runs_[unit][k];
      for (const auto& [kind, values, buffer] : arrays) {
        std::memset(buffer->data(), 0, buffer->bytes());
        const bool is_signed = kind == ExtentKind::kExpAvg;
        if (kind != ExtentKind::kMaster && !runs.empty()) {
          if (values != nullptr) {
            MomentFromFp32(runs, is_signed, values + chunk.begin, buffer->as<uint8_t>());
          } else {
            ZeroMoment(runs, is_signed, buffer->as<uint8_t>());
          }
        } else if (values != nullptr) {
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

  // The unit's stored form is its chunks' stored forms section by section: each section of
  // the unit's form is the chunks' sections of that kind, one after another (the chunks are
  // block-aligned slices of the state range, and each section keeps element order).
  Status ReadMoment(int unit, int moment, uint8_t* stored) override {
    return CopyMoment(unit, moment, stored, /*in=*/false);
  }
  Status WriteMoment(int unit, int moment, const uint8_t* stored) override {
    return CopyMoment(unit, moment, const_cast<uint8_t*>(stored), /*in=*/true);
  }

  Status Flush() override {
    RETURN_IF_ERROR(ctx_.host->Synchronize());
    RETURN_IF_ERROR(ctx_.copy->Synchronize());
    Status status = nvme_->Drain();
    if (param_nvme_) status.Update(param_nvme_->Drain());
    // Reads ahead are done now; their data may go stale (WriteState): forget them.
    for (Slot& slot : slots_) slot.prefetched = -1;
    return status;
  }

 private:
  // The state a slot holds for a chunk with `runs`: fp32 moments, or the stored forms of
  // 8-bit ones (the fp32 runs' values at the start, as AdamOverRange expects them).
  static AdamState SlotState(Slot& slot, const float* grads, const std::vector<StateRun>& runs) {
    AdamState state{slot.master.as<float>(), grads, slot.exp_avg.as<float>(),
                    slot.exp_avg_sq.as<float>()};
    if (runs.empty()) return state;
    const MomentSections sections = SectionsOf(runs);
    uint8_t* m = slot.exp_avg.as<uint8_t>();
    uint8_t* v = slot.exp_avg_sq.as<uint8_t>();
    state.runs = &runs;
    state.m_codes = m + sections.codes_offset();
    state.m_absmax = reinterpret_cast<float*>(m + sections.absmax_offset());
    state.v_codes = v + sections.codes_offset();
    state.v_absmax = reinterpret_cast<float*>(v + sections.absmax_offset());
    return state;
  }

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
    const float* kept = hand_over_ != nullptr ? hand_over_->KeptSum(unit, k) : nullptr;
    if (kept != nullptr) {
      grads = kept;  // summed on the host stream, before this AdamW
    } else if (grads_->tier() == StateTier::kNvme) {
      // The chunk's gradient sum, after the slot's previous AdamW (which read the slot's
      // grads; its write-back follows it); the tier orders it after the sum's write-back.
      grad_load = nvme_->ReadAfter(chunk.id, {{ExtentKind::kGrads, slot.grads.data()}},
                                   slot.write_back);
      RETURN_IF_ERROR(device.Wait(host, grads_->ready(unit)));
      grads = slot.grads.as<float>();
    } else if (grads_->tier() == StateTier::kDevice) {
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
                                             : ElementAt(param_dest, chunk.begin, element_bytes);
    const ShardRange range{shard_begin + chunk.begin, shard_begin + chunk.end};
    timer_.Start(host);
    RETURN_IF_ERROR(AdamOverRange(ctx_, *ctx_.host_ops, host, unit, params, range, range.begin,
                                  SlotState(slot, grads, chunk_runs_[unit][k]), out));
    if (out == slot.params.data()) {
      // The slot's buffer goes out whole (copy or write-back): its gaps and padding must be
      // zero, as in the other homes, not what an earlier chunk left in the slot.
      std::vector<ShardRange> gaps = GapRanges((*ctx_.layouts)[unit], range);
      if (!gaps.empty()) {
        void* base = out;
        host.EnqueueHost([base, gaps = std::move(gaps), element_bytes] {
          for (const ShardRange& gap : gaps) {
            std::memset(ElementAt(base, gap.begin, element_bytes), 0,
                        (gap.end - gap.begin) * element_bytes);
          }
          return absl::OkStatus();
        });
      }
    }
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
    if (kept != nullptr) hand_over_->ReleaseKeptSum(unit, k, slot.write_back);
    if (params_on_nvme_) {
      slot.param_write_back = param_write_->WriteAfter(chunk.id, slot.params.data(), &stepped);
      slot.stepped.Hold(use, param_nvme_, slot.param_write_back);
    }
    if (!to_device) return absl::OkStatus();
    RETURN_IF_ERROR(device.Wait(copy, stepped));
    RETURN_IF_ERROR(device.CopyAsync(ElementAt(param_dest, chunk.begin, element_bytes),
                                     slot.params.data(), n * element_bytes, copy));
    return device.Record(*slot.copied, copy);
  }

  // One moment of `unit` between `stored` (the unit's stored form) and its chunks' extents,
  // through slot 0's buffer of that moment.
  Status CopyMoment(int unit, int moment, uint8_t* stored, bool in) {
    const UnitState& state = (*ctx_.units)[unit];
    if (state.state_runs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "unit ", unit, " has no 8-bit Adam states (train.optimizer_states=fp32)"));
    }
    if (moment != 0 && moment != 1) {
      return absl::InvalidArgumentError(absl::StrCat("no Adam moment ", moment));
    }
    RETURN_IF_ERROR(Flush());
    const ExtentKind kind = kMomentKinds[moment];
    uint8_t* buffer = (moment == 0 ? slots_[0].exp_avg : slots_[0].exp_avg_sq).as<uint8_t>();
    const MomentSections whole = SectionsOf(state.state_runs);
    // Where the next chunk's sections go in the unit's form.
    size_t fp32_at = 0, codes_at = whole.codes_offset(), absmax_at = whole.absmax_offset();
    for (size_t k = 0; k < chunks_[unit].size(); ++k) {
      const MomentSections part = SectionsOf(chunk_runs_[unit][k]);
      const std::pair<size_t, size_t> sections[] = {  // (unit offset, chunk offset), bytes
          {fp32_at, 0}, {codes_at, part.codes_offset()}, {absmax_at, part.absmax_offset()}};
      const size_t bytes[] = {part.fp32 * 4, part.codes, part.blocks * 4};
      const int id = chunks_[unit][k].id;
      if (!in) RETURN_IF_ERROR(nvme_->Wait(nvme_->Read(id, {{kind, buffer}})));
      for (int i = 0; i < 3; ++i) {
        const auto& [unit_at, chunk_at] = sections[i];
        if (in) {
          std::memcpy(buffer + chunk_at, stored + unit_at, bytes[i]);
        } else {
          std::memcpy(stored + unit_at, buffer + chunk_at, bytes[i]);
        }
      }
      if (in) RETURN_IF_ERROR(nvme_->Wait(nvme_->Write(id, {{kind, buffer}})));
      fp32_at += bytes[0];
      codes_at += bytes[1];
      absmax_at += bytes[2];
    }
    if (fp32_at != whole.codes_offset() || codes_at != whole.absmax_offset() ||
        absmax_at != whole.bytes()) {
      return absl::InternalError(absl::StrCat(
          "nvme optimizer: unit ", unit, "'s chunks do not add up to its 8-bit moment's "
          "stored form"));
    }
    return absl::OkStatus();
  }

  HomeContext ctx_;
  GradHome* grads_;
  NvmeTier* nvme_;
  ParamWriteBack* param_write_;  // null: params not on nvme
  NvmeTier* param_nvme_;         // its tier
  bool params_on_nvme_;
  bool params_to_device_;  // else the params' part is in the host tier (or on nvme)
  SumHandOver* hand_over_;  // null: the sums are read from the tier
  std::vector<std::vector<NvmeChunk>> chunks_;
  // [unit][chunk]: the chunk's state runs (slots from the chunk's start), or empty (fp32).
  std::vector<std::vector<std::vector<StateRun>>> chunk_runs_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  std::vector<int> order_;  // chunks stepped this step, in order
  std::vector<std::unique_ptr<Event>> ready_;
  std::unique_ptr<Event> join_;
  StreamTimer timer_;
};

}  // namespace

StatusOr<std::unique_ptr<OptimizerHome>> OptimizerHome::CreateNvme(
    const HomeContext& ctx, GradHome* grads, NvmeTier* nvme,
    std::vector<std::vector<NvmeChunk>> chunks, ParamHome* params, int slots,
    SumHandOver* hand_over) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  RETURN_IF_ERROR(CheckNvmeChunks(ctx, chunks));
  if (grads == nullptr || nvme == nullptr || params == nullptr || slots < 1 ||
      chunks.size() != ctx.units->size()) {
    return absl::InvalidArgumentError(
        "an nvme optimizer home needs grads, a tier, params, slots and every unit's chunks");
  }
  ParamWriteBack* param_write = params->write_back();
  // Per chunk, its state runs: the chunk's block-aligned slice of the unit's state range,
  // numbered from the chunk's start, as the tier's moment extents were sized
  // (runtime/zero_components.cc).
  std::vector<std::vector<std::vector<StateRun>>> chunk_runs(chunks.size());
  for (size_t u = 0; u < chunks.size(); ++u) {
    const UnitState& state = (*ctx.units)[u];
    for (const NvmeChunk& chunk : chunks[u]) {
      std::vector<StateRun>& runs = chunk_runs[u].emplace_back();
      if (state.state_runs.empty()) continue;
      const size_t origin = state.state_runs.front().begin;
      runs = StateRuns((*ctx.layouts)[u], {origin + chunk.begin, origin + chunk.end});
      if (nvme->PaddedBytes(chunk.id, ExtentKind::kExpAvg) < SectionsOf(runs).bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nvme optimizer: unit ", (*ctx.layouts)[u].name(), " chunk ", chunk.id,
            ": its moment extents are smaller than the chunk's 8-bit stored form"));
      }
    }
  }
  // Slots sized for the largest chunk's extents of each kind (4 KiB-padded for O_DIRECT).
  uint64_t state_bytes = 0, moment_bytes = 0, param_bytes = 4096;
  for (const auto& unit_chunks : chunks) {
    for (const NvmeChunk& chunk : unit_chunks) {
      state_bytes = std::max(state_bytes, nvme->PaddedBytes(chunk.id, ExtentKind::kMaster));
      moment_bytes = std::max({moment_bytes, nvme->PaddedBytes(chunk.id, ExtentKind::kExpAvg),
                               nvme->PaddedBytes(chunk.id, ExtentKind::kExpAvgSq)});
      param_bytes = std::max<uint64_t>(
          param_bytes, param_write != nullptr
                           ? param_write->ChunkBytes(chunk.id)
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
                                                 buffer == &slot.master ? state_bytes
                                                                        : moment_bytes,
                                                 name));
    }
    if (grads->tier() != StateTier::kHost) {
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
      new NvmeOptimizerHome(ctx, grads, nvme, params, hand_over, std::move(chunks),
                            std::move(chunk_runs), std::move(all), std::move(ready),
                            std::move(join)));
}

}  // namespace strata
