// Names, descriptions and argument checks shared by every Communicator. See communicator.h.
#include "collectives/communicator.h"

#include <cstdint>
#include <limits>

namespace strata {
namespace {

Status Invalid(const CollectiveCall& call, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(DescribeCall(call), ": ", problem));
}

// The byte size of `elements` of `dtype`, or an error when it does not fit in size_t.
Status CheckBytes(const CollectiveCall& call, size_t elements_per_rank, int world_size) {
  const size_t limit = std::numeric_limits<size_t>::max() / DTypeBytes(call.dtype) /
                       static_cast<size_t>(world_size > 0 ? world_size : 1);
  if (elements_per_rank > limit) {
    return Invalid(call, absl::StrCat("count ", elements_per_rank, " times ", world_size,
                                      " ranks overflows the byte size"));
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a_begin = reinterpret_cast<uintptr_t>(a);
  const auto b_begin = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

}  // namespace

const char* CollectiveName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

std::string DescribeCall(const CollectiveCall& call) {
  std::string text = absl::StrCat(CollectiveName(call.op), " #", call.sequence);
  if (call.op == CollectiveOp::kBarrier) return text;
  absl::StrAppend(&text, " (", call.count, " x ", DTypeName(call.dtype));
  if (call.op == CollectiveOp::kBroadcast) absl::StrAppend(&text, ", root ", call.root);
  absl::StrAppend(&text, ")");
  return text;
}

bool SameCollective(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.op != b.op) return false;
  if (a.op == CollectiveOp::kBarrier) return true;
  return a.dtype == b.dtype && a.count == b.count &&
         (a.op != CollectiveOp::kBroadcast || a.root == b.root);
}

Status CheckAllReduce(const void* data, const CollectiveCall& call) {
  RETURN_IF_ERROR(CheckBytes(call, call.count, 1));
  if (call.count > 0 && data == nullptr) return Invalid(call, "data is null");
  return absl::OkStatus();
}

Status CheckReduceScatter(const void* input, const void* output, const CollectiveCall& call,
                          int rank, int world_size) {
  RETURN_IF_ERROR(CheckBytes(call, call.count, world_size));
  if (call.count == 0) return absl::OkStatus();
  if (input == nullptr || output == nullptr) return Invalid(call, "a buffer is null");
  const size_t chunk_bytes = call.count * DTypeBytes(call.dtype);
  const auto* in_place = static_cast<const char*>(input) + rank * chunk_bytes;
  if (output == in_place) return absl::OkStatus();
  if (Overlap(input, chunk_bytes * world_size, output, chunk_bytes)) {
    return Invalid(call, absl::StrCat("output overlaps input but is not the in-place position "
                                      "input + rank * count (rank ",
                                      rank, ")"));
  }
  return absl::OkStatus();
}

Status CheckAllGather(const void* input, const void* output, const CollectiveCall& call, int rank,
                      int world_size) {
  RETURN_IF_ERROR(CheckBytes(call, call.count, world_size));
  if (call.count == 0) return absl::OkStatus();
  if (input == nullptr || output == nullptr) return Invalid(call, "a buffer is null");
  const size_t chunk_bytes = call.count * DTypeBytes(call.dtype);
  const auto* in_place = static_cast<const char*>(output) + rank * chunk_bytes;
  if (input == in_place) return absl::OkStatus();
  if (Overlap(input, chunk_bytes, output, chunk_bytes * world_size)) {
    return Invalid(call, absl::StrCat("input overlaps output but is not the in-place position "
                                      "output + rank * count (rank ",
                                      rank, ")"));
  }
  return absl::OkStatus();
}

Status CheckBroadcast(const void* data, const CollectiveCall& call, int world_size) {
  if (call.root < 0 || call.root >= world_size) {
    return Invalid(call,
                   absl::StrCat("root ", call.root, " is not a rank of a group of ", world_size));
  }
  return CheckAllReduce(data, call);
}

CollectiveCall CheckedCommunicator::Next(CollectiveOp op, DType dtype, size_t count) const {
  CollectiveCall call;
  call.op = op;
  call.dtype = dtype;
  call.count = count;
  call.sequence = issued_.load();
  return call;
}

Status CheckedCommunicator::Accept(CollectiveCall call, const void* input, void* output,
                                   Stream& stream) {
  call.sequence = issued_.fetch_add(1);
  StreamLabel label(stream, CollectiveName(call.op), "comm",
                    {{"bytes", std::to_string(call.count * DTypeBytes(call.dtype))},
                     {"sequence", std::to_string(call.sequence)}});
  return Issue(call, input, output, stream);
}

Status CheckedCommunicator::AllReduce(void* data, size_t count, DType dtype, Stream& stream) {
  CollectiveCall call = Next(CollectiveOp::kAllReduce, dtype, count);
  RETURN_IF_ERROR(CheckAllReduce(data, call));
  return Accept(call, data, data, stream);
}

Status CheckedCommunicator::ReduceScatter(const void* input, void* output, size_t count,
                                          DType dtype, Stream& stream) {
  CollectiveCall call = Next(CollectiveOp::kReduceScatter, dtype, count);
  RETURN_IF_ERROR(CheckReduceScatter(input, output, call, rank(), world_size()));
  return Accept(call, input, output, stream);
}

Status CheckedCommunicator::AllGather(const void* input, void* output, size_t count, DType dtype,
                                      Stream& stream) {
  CollectiveCall call = Next(CollectiveOp::kAllGather, dtype, count);
  RETURN_IF_ERROR(CheckAllGather(input, output, call, rank(), world_size()));
  return Accept(call, input, output, stream);
}

Status CheckedCommunicator::Broadcast(void* data, size_t count, DType dtype, int root,
                                      Stream& stream) {
  CollectiveCall call = Next(CollectiveOp::kBroadcast, dtype, count);
  call.root = root;
  RETURN_IF_ERROR(CheckBroadcast(data, call, world_size()));
  return Accept(call, data, data, stream);
}

Status CheckedCommunicator::Barrier(Stream& stream) {
  return Accept(Next(CollectiveOp::kBarrier, DType::kF32, 0), nullptr, nullptr, stream);
}

}  // namespace strata
