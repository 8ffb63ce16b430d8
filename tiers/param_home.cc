// The device, host and NVMe param homes; see param_home.h.
#include "tiers/param_home.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "tiers/stream_helpers.h"

namespace strata {
namespace {

// Parts in the device or host pool.
class ResidentParamHome : public ParamHome {
 public:
  ResidentParamHome(const HomeContext& ctx, Tier tier, std::vector<size_t> part_elements,
                    std::vector<Buffer> parts, std::vector<void*> shared)
      : ParamHome(std::move(part_elements)),
        ctx_(ctx),
        tier_(tier),
        parts_(std::move(parts)),
        shared_(std::move(shared)) {
    shared_.resize(parts_.size(), nullptr);
  }

  StateTier tier() const override {
    return tier_ == Tier::kDevice ? StateTier::kDevice : StateTier::kHost;
  }
  void* part(int unit) override {
    return shared_[unit] != nullptr ? shared_[unit] : parts_[unit].data();
  }

  Status Write(int unit, const void* values) override {
    void* part = this->part(unit);
    if (values == part) return absl::OkStatus();  // in place already (a shared master)
    RETURN_IF_ERROR(ctx_.device->CopyAsync(part, values, Bytes(unit), *ctx_.compute));
    return ctx_.compute->Synchronize();
  }

  Status Read(int unit, void* out) override {
    RETURN_IF_ERROR(ctx_.device->CopyAsync(out, part(unit), Bytes(unit), *ctx_.compute));
    return ctx_.compute->Synchronize();
  }

  Status CopyUp(int unit, void* dest, Stream& copy) override {
    return ctx_.device->CopyAsync(dest, part(unit), Bytes(unit), copy);
  }

 private:
  HomeContext ctx_;
  Tier tier_;
  size_t Bytes(int unit) const { return part_elements(unit) * DTypeBytes(ctx_.dtype); }

  std::vector<Buffer> parts_;
  std::vector<void*> shared_;  // per unit: the memory its part shares, or null
};

// Shards in a swap file, read ahead through a few host buffers.
class NvmeParamHome : public ParamHome, public ParamWriteBack {
 public:
  struct ReadBuffer {
    Buffer buffer;
    std::unique_ptr<Event> copied;  // its shard copied to the device
  };

  NvmeParamHome(const HomeContext& ctx, std::vector<size_t> part_elements,
                std::unique_ptr<NvmeTier> tier, std::vector<std::vector<NvmeChunk>> chunks,
                std::vector<ReadBuffer> reads)
      : ParamHome(std::move(part_elements)), ctx_(ctx), tier_(std::move(tier)),
        chunks_(std::move(chunks)), reads_(std::move(reads)) {}

  ~NvmeParamHome() override {
    // Reads ahead may still be landing in the read buffers (a failed step leaves them
    // posted; the streams are idle by now): they must be done before the buffers go.
    tier_->Drain().IgnoreError();
  }

  StateTier tier() const override { return StateTier::kNvme; }
  void* part(int) override { return nullptr; }
  int read_buffers() const override { return static_cast<int>(reads_.size()); }
  ParamWriteBack* write_back() override { return this; }
  uint64_t bytes_read() const override { return tier_->bytes_read(); }
  uint64_t bytes_written() const override { return tier_->bytes_written(); }
  double busy_ms() const override { return tier_->busy_ms(); }
  uint64_t nvme_file_bytes() const override { return tier_->file_bytes(); }
  Status Drain() override { return tier_->Drain(); }

  // Chunk by chunk through an aligned host buffer of the shard's padded size.
  Status Write(int unit, const void* values) override {
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    ASSIGN_OR_RETURN(Buffer host, ctx_.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                        PaddedShardBytes(unit),
                                                        "param shard write"));
    if (!ctx_.device->dry_run()) {  // a dry run's buffers stay untouched (uncommitted)
      std::memset(host.data(), 0, host.bytes());
      std::memcpy(host.data(), values, part_elements(unit) * element_bytes);
    }
    for (const NvmeChunk& chunk : chunks_[unit]) {
      RETURN_IF_ERROR(tier_->Wait(tier_->Write(
          chunk.id, {{ExtentKind::kParams, ElementAt(host.data(), chunk.begin, element_bytes)}})));
    }
    return absl::OkStatus();
  }

  Status Read(int unit, void* out) override {
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    ASSIGN_OR_RETURN(Buffer host, ctx_.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                        PaddedShardBytes(unit),
                                                        "param shard read"));
    for (const NvmeChunk& chunk : chunks_[unit]) {
      RETURN_IF_ERROR(tier_->Wait(tier_->Read(
          chunk.id, {{ExtentKind::kParams, ElementAt(host.data(), chunk.begin, element_bytes)}})));
    }
    std::memcpy(out, host.data(), part_elements(unit) * element_bytes);
    return absl::OkStatus();
  }

  // nvme -> the next read buffer (I/O thread) -> `dest` (copy stream, once the reads are
  // done).
  Status CopyUp(int unit, void* dest, Stream& copy) override {
    const size_t element_bytes = DTypeBytes(ctx_.dtype);
    ReadBuffer& read = reads_[next_read_++ % reads_.size()];
    RETURN_IF_ERROR(read.copied->Synchronize());  // its previous shard has gone up
    std::vector<NvmeTier::Ticket> tickets;
    for (const NvmeChunk& chunk : chunks_[unit]) {
      tickets.push_back(tier_->Read(
          chunk.id,
          {{ExtentKind::kParams, ElementAt(read.buffer.data(), chunk.begin, element_bytes)}}));
    }
    NvmeTier* tier = tier_.get();
    copy.EnqueueHost([tier, tickets] {
      Status status;
      for (NvmeTier::Ticket ticket : tickets) status.Update(tier->Wait(ticket));
      return status;
    });
    RETURN_IF_ERROR(ctx_.device->CopyAsync(dest, read.buffer.data(),
                                           part_elements(unit) * element_bytes, copy));
    return ctx_.device->Record(*read.copied, copy);
  }

  // ParamWriteBack.
  NvmeTier& tier() override { return *tier_; }
  uint64_t ChunkBytes(int chunk_id) const override {
    return tier_->PaddedBytes(chunk_id, ExtentKind::kParams);
  }
  NvmeTier::Ticket WriteAfter(int chunk_id, const void* src, Event* after) override {
    return tier_->WriteAfter(chunk_id, {{ExtentKind::kParams, const_cast<void*>(src)}}, after);
  }

  // Chunk k of a shard lands at its element offset; every chunk but the last is a whole
  // number of 4 KiB pages, so the last one's padding ends the buffer.
  static uint64_t PaddedShardBytes(const NvmeTier& tier, const std::vector<NvmeChunk>& chunks,
                                   DType dtype) {
    const NvmeChunk& last = chunks.back();
    return std::max<uint64_t>(
        4096, last.begin * DTypeBytes(dtype) + tier.PaddedBytes(last.id, ExtentKind::kParams));
  }

 private:
  uint64_t PaddedShardBytes(int unit) const {
    return PaddedShardBytes(*tier_, chunks_[unit], ctx_.dtype);
  }

  HomeContext ctx_;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::vector<ReadBuffer> reads_;
  size_t next_read_ = 0;
};

// Two homes, each keeping a group of units: the trainable units' and the frozen ones'.
class SplitParamHome : public ParamHome {
 public:
  SplitParamHome(std::vector<size_t> part_elements, std::unique_ptr<ParamHome> trainable,
                 std::unique_ptr<ParamHome> frozen, std::vector<bool> frozen_units)
      : ParamHome(std::move(part_elements)), trainable_(std::move(trainable)),
        frozen_(std::move(frozen)), frozen_units_(std::move(frozen_units)) {}

  StateTier tier() const override { return trainable_->tier(); }
  StateTier unit_tier(int unit) const override { return Of(unit).tier(); }
  void* part(int unit) override { return Of(unit).part(unit); }
  Status Write(int unit, const void* values) override { return Of(unit).Write(unit, values); }
  Status Read(int unit, void* out) override { return Of(unit).Read(unit, out); }
  Status CopyUp(int unit, void* dest, Stream& copy) override {
    return Of(unit).CopyUp(unit, dest, copy);
  }
  int read_buffers() const override {
    const int a = trainable_->read_buffers(), b = frozen_->read_buffers();
    return a == 0 ? b : b == 0 ? a : std::min(a, b);
  }
  ParamWriteBack* write_back() override { return trainable_->write_back(); }
  uint64_t bytes_read() const override {
    return trainable_->bytes_read() + frozen_->bytes_read();
  }
  uint64_t bytes_written() const override {
    return trainable_->bytes_written() + frozen_->bytes_written();
  }
  double busy_ms() const override { return trainable_->busy_ms() + frozen_->busy_ms(); }
  uint64_t nvme_file_bytes() const override {
    return trainable_->nvme_file_bytes() + frozen_->nvme_file_bytes();
  }
  Status Drain() override {
    Status status = trainable_->Drain();
    status.Update(frozen_->Drain());
    return status;
  }

 private:
  ParamHome& Of(int unit) const { return frozen_units_[unit] ? *frozen_ : *trainable_; }

  std::unique_ptr<ParamHome> trainable_, frozen_;
  std::vector<bool> frozen_units_;
};

}  // namespace

std::unique_ptr<ParamHome> ParamHome::CreateSplit(std::unique_ptr<ParamHome> trainable,
                                                  std::unique_ptr<ParamHome> frozen,
                                                  std::vector<bool> frozen_units) {
  std::vector<size_t> parts;
  for (size_t u = 0; u < frozen_units.size(); ++u) {
    parts.push_back((frozen_units[u] ? frozen : trainable)->part_elements(u));
  }
  return std::make_unique<SplitParamHome>(std::move(parts), std::move(trainable),
                                          std::move(frozen), std::move(frozen_units));
}

StatusOr<std::unique_ptr<ParamHome>> ParamHome::CreateResident(
    const HomeContext& ctx, Tier tier, const std::vector<size_t>& part_elements,
    const std::vector<void*>& shared) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  if (part_elements.size() != ctx.layouts->size() ||
      (!shared.empty() && shared.size() != part_elements.size())) {
    return absl::InvalidArgumentError("a param home needs every unit's part size");
  }
  std::vector<Buffer> parts;
  Status status;
  for (size_t u = 0; u < part_elements.size() && status.ok(); ++u) {
    if (part_elements[u] == 0 || (!shared.empty() && shared[u] != nullptr)) {
      // not kept in this home, or in memory shared with another
      parts.emplace_back();
      continue;
    }
    StatusOr<Buffer> part = AllocateZeroedIn(ctx, tier, StateKind::kParams,
                                             part_elements[u] * DTypeBytes(ctx.dtype),
                                             (*ctx.layouts)[u].name() + " params");
    status = part.status();
    if (part.ok()) parts.push_back(std::move(*part));
  }
  // Device parts are zeroed on the compute stream: that must be done before any of them
  // can go (a failed allocation frees the others on return).
  status.Update(ctx.compute->Synchronize());
  RETURN_IF_ERROR(status);
  return std::unique_ptr<ParamHome>(
      new ResidentParamHome(ctx, tier, part_elements, std::move(parts), shared));
}

StatusOr<std::unique_ptr<ParamHome>> ParamHome::CreateNvme(
    const HomeContext& ctx, std::unique_ptr<NvmeTier> tier,
    std::vector<std::vector<NvmeChunk>> chunks, int read_buffers) {
  RETURN_IF_ERROR(CheckHomeContext(ctx));
  if (tier == nullptr || read_buffers < 1 || chunks.size() != ctx.layouts->size()) {
    return absl::InvalidArgumentError(
        "an nvme param home needs a tier, read buffers and every unit's chunks");
  }
  std::vector<size_t> part_elements;
  uint64_t bytes = 4096;
  bool any = false;
  for (const auto& unit_chunks : chunks) {
    if (unit_chunks.empty()) {  // not kept in this home
      part_elements.push_back(0);
      continue;
    }
    any = true;
    part_elements.push_back(unit_chunks.back().end);
    bytes = std::max(bytes, NvmeParamHome::PaddedShardBytes(*tier, unit_chunks, ctx.dtype));
  }
  if (!any) return absl::InvalidArgumentError("an nvme param home without any unit's chunks");
  std::vector<NvmeParamHome::ReadBuffer> reads(read_buffers);
  for (NvmeParamHome::ReadBuffer& read : reads) {
    ASSIGN_OR_RETURN(read.buffer, ctx.device->Allocate(Tier::kHost, StateKind::kParams, bytes,
                                                       "param shard read-ahead"));
    ASSIGN_OR_RETURN(read.copied, ctx.device->CreateEvent());
  }
  return std::unique_ptr<ParamHome>(new NvmeParamHome(
      ctx, std::move(part_elements), std::move(tier), std::move(chunks), std::move(reads)));
}

}  // namespace strata
