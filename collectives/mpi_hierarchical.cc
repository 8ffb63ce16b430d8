// The hierarchical collectives of the MPI communicator (see mpi_communicator.h for when they
// run and docs/multinode.md for their byte counts). The world is n nodes of k ranks, node m
// = ranks m*k .. m*k+k-1; rank (m, l) = m*k + l. Its node peers are (m, l') and its "rail"
// is (m', l) for every node m'. Every reduction keeps the fixed rank order of
// communicator.h: a sum starts on node 0 and is CHAINED through the nodes in order, each
// node's rank on the rail adding its node's k values one by one to the fp32 partial sum it
// received, so the additions are exactly those of the flat path and the result has the
// same bits (bf16: the partials travel as fp32 and are rounded once, at the end).
// Intra-node messages are point-to-point on the communicator; Open MPI carries them through
// shared memory (its vader transport) when the ranks share a machine.
// Thread-safety: the State's Run thread only.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/mpi_state.h"
#include "collectives/reduce.h"

namespace strata {
namespace mpi_internal {

// Reduce-scatter. Rank (m, l) reduces the n chunks of its rail (destinations (m', l)):
//   1. within the node: it sends every node peer (m, l') the n chunks of that peer's rail
//      and receives its own rail's n chunks from each peer;
//   2. along the rail: it receives the fp32 partial sums of its n chunks from (m-1, l)
//      (node 0 starts them), adds its node's k values in local order, and sends them on to
//      (m+1, l); the last node rounds them and sends each final chunk to its owner (m', l).
// Segments bound the scratch memory; the last node's finals are received straight into the
// output (their receives are posted first, so the last node never waits on them).
Status State::HierarchicalReduceScatter(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const DType dtype = call.dtype;
  const size_t eb = DTypeBytes(dtype);
  const char* input = static_cast<const char*>(job.input);
  char* output = static_cast<char*>(job.output);
  const size_t count = call.count;
  const int n = layout_.nodes, k = ranks_per_node_, m = node_, l = local_;
  const size_t nn = static_cast<size_t>(n);
  const size_t per_element = nn * (static_cast<size_t>(k - 1) * eb + sizeof(float) + eb);
  const size_t segment_cap = std::max<size_t>(1, options_.max_scratch_bytes / per_element);
  auto slot = [&](int peer_local) {
    return static_cast<size_t>(peer_local < l ? peer_local : peer_local - 1);
  };
  auto chunk = [&](int node, int local, size_t begin) {
    return input + ((static_cast<size_t>(node) * k + local) * count + begin) * eb;
  };

  Exchange finals(*this, call, deadline);
  if (m < n - 1) {
    for (size_t begin = 0; begin < count; begin += segment_cap) {
      const size_t length = std::min(segment_cap, count - begin);
      finals.Receive(output + begin * eb, length * eb, RailPeer(n - 1));
    }
  }
  std::vector<const void*> sources(k);
  for (size_t begin = 0; begin < count; begin += segment_cap) {
    const size_t length = std::min(segment_cap, count - begin);
    char* scratch = Scratch(per_element * length);
    float* acc = reinterpret_cast<float*>(scratch);          // n partial sums of `length`
    char* received = scratch + nn * length * sizeof(float);  // [peer slot][node] chunks
    char* staged = received + static_cast<size_t>(k - 1) * nn * length * eb;  // finals
    auto received_chunk = [&](int peer_local, int node) {
      return received + ((slot(peer_local) * nn + node) * length) * eb;
    };

    Exchange within(*this, call, deadline);
    for (int peer_local = 0; peer_local < k; ++peer_local) {
      if (peer_local == l) continue;
      for (int node = 0; node < n; ++node) {
        within.Send(chunk(node, peer_local, begin), length * eb, NodePeer(peer_local));
      }
      for (int node = 0; node < n; ++node) {
        within.Receive(received_chunk(peer_local, node), length * eb, NodePeer(peer_local));
      }
    }
    if (m > 0) within.Receive(acc, nn * length * sizeof(float), RailPeer(m - 1));
    RETURN_IF_ERROR(within.Wait());

    for (int node = 0; node < n; ++node) {
      for (int local = 0; local < k; ++local) {
        sources[local] = local == l ? chunk(node, l, begin) : received_chunk(local, node);
      }
      AccumulateInRankOrder(acc + node * length, m > 0, sources.data(), k, length, dtype);
    }

    Exchange along(*this, call, deadline);
    if (m < n - 1) {
      along.Send(acc, nn * length * sizeof(float), RailPeer(m + 1));
    } else {
      for (int node = 0; node < n; ++node) {
        if (node == m) {
          StoreSums(acc + node * length, output + begin * eb, length, dtype);
        } else {
          char* final_chunk = staged + node * length * eb;
          StoreSums(acc + node * length, final_chunk, length, dtype);
          along.Send(final_chunk, length * eb, RailPeer(node));
        }
      }
    }
    RETURN_IF_ERROR(along.Wait());
  }
  return finals.Wait();
}

// All-reduce. Each segment is cut into k slices; rank (m, l) reduces slice l:
//   1. within the node: slice l' goes to node peer (m, l'); slice l comes from every peer;
//   2. along the rail: the fp32 partial of slice l comes from (m-1, l), gets the node's k
//      values in local order and goes on to (m+1, l); the last node rounds it and sends the
//      final slice to every (m', l);
//   3. within the node: slice l goes to every node peer, which send theirs.
Status State::HierarchicalAllReduce(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const DType dtype = call.dtype;
  const size_t eb = DTypeBytes(dtype);
  char* data = static_cast<char*>(job.output);
  const int n = layout_.nodes, k = ranks_per_node_, m = node_, l = local_;
  const size_t kk = static_cast<size_t>(k);
  const size_t slice_cap = std::max<size_t>(
      1, options_.max_scratch_bytes / (static_cast<size_t>(k - 1) * eb + sizeof(float)));
  const size_t segment_cap = slice_cap * kk;
  auto slot = [&](int peer_local) {
    return static_cast<size_t>(peer_local < l ? peer_local : peer_local - 1);
  };
  std::vector<const void*> sources(k);
  for (size_t begin = 0; begin < call.count; begin += segment_cap) {
    const size_t length = std::min(segment_cap, call.count - begin);
    const size_t slice = (length + kk - 1) / kk;
    auto slice_begin = [&](int j) { return begin + std::min(length, j * slice); };
    auto slice_length = [&](int j) {
      return std::min(length, (j + 1) * slice) - std::min(length, j * slice);
    };
    const size_t mine = slice_length(l);
    char* my_slice = data + slice_begin(l) * eb;
    char* scratch = Scratch(slice * (sizeof(float) + (kk - 1) * eb));
    float* acc = reinterpret_cast<float*>(scratch);
    char* received = scratch + slice * sizeof(float);

    Exchange within(*this, call, deadline);
    for (int peer_local = 0; peer_local < k; ++peer_local) {
      if (peer_local == l) continue;
      const size_t theirs = slice_length(peer_local);
      if (theirs > 0) {
        within.Send(data + slice_begin(peer_local) * eb, theirs * eb, NodePeer(peer_local));
      }
      if (mine > 0) {
        within.Receive(received + slot(peer_local) * slice * eb, mine * eb, NodePeer(peer_local));
      }
    }
    if (m > 0 && mine > 0) within.Receive(acc, mine * sizeof(float), RailPeer(m - 1));
    RETURN_IF_ERROR(within.Wait());

    if (mine > 0) {
      for (int local = 0; local < k; ++local) {
        sources[local] = local == l ? my_slice : received + slot(local) * slice * eb;
      }
      AccumulateInRankOrder(acc, m > 0, sources.data(), k, mine, dtype);
      Exchange along(*this, call, deadline);
      if (m < n - 1) {
        along.Send(acc, mine * sizeof(float), RailPeer(m + 1));
        along.Receive(my_slice, mine * eb, RailPeer(n - 1));
      } else {
        StoreSums(acc, my_slice, mine, dtype);
        for (int node = 0; node < n - 1; ++node) along.Send(my_slice, mine * eb, RailPeer(node));
      }
      RETURN_IF_ERROR(along.Wait());
    }

    Exchange gather(*this, call, deadline);
    for (int peer_local = 0; peer_local < k; ++peer_local) {
      if (peer_local == l) continue;
      if (mine > 0) gather.Send(my_slice, mine * eb, NodePeer(peer_local));
      const size_t theirs = slice_length(peer_local);
      if (theirs > 0) {
        gather.Receive(data + slice_begin(peer_local) * eb, theirs * eb, NodePeer(peer_local));
      }
    }
    RETURN_IF_ERROR(gather.Wait());
  }
  return absl::OkStatus();
}

// All-gather: rank (m, l) first swaps its block with its rail (m', l), then sends the n
// blocks of its rail to every node peer and receives theirs. Bytes are copied, not summed,
// so the order does not matter.
Status State::HierarchicalAllGather(const Job& job, Clock::time_point deadline) {
  const CollectiveCall& call = job.call;
  const size_t eb = DTypeBytes(call.dtype);
  const size_t count = call.count;
  char* output = static_cast<char*>(job.output);
  char* mine = output + rank_ * count * eb;
  const int n = layout_.nodes, k = ranks_per_node_, m = node_, l = local_;
  if (job.input != mine) std::memcpy(mine, job.input, count * eb);
  auto block = [&](int node, int local, size_t begin) {
    return output + ((static_cast<size_t>(node) * k + local) * count + begin) * eb;
  };
  const size_t segment_cap = std::max<size_t>(1, kMaxMessageBytes / eb);
  for (size_t begin = 0; begin < count; begin += segment_cap) {
    const size_t bytes = std::min(segment_cap, count - begin) * eb;
    Exchange along(*this, call, deadline);
    for (int node = 0; node < n; ++node) {
      if (node == m) continue;
      along.Send(mine + begin * eb, bytes, RailPeer(node));
      along.Receive(block(node, l, begin), bytes, RailPeer(node));
    }
    RETURN_IF_ERROR(along.Wait());
    Exchange within(*this, call, deadline);
    for (int peer_local = 0; peer_local < k; ++peer_local) {
      if (peer_local == l) continue;
      for (int node = 0; node < n; ++node) {
        within.Send(block(node, l, begin), bytes, NodePeer(peer_local));
        within.Receive(block(node, peer_local, begin), bytes, NodePeer(peer_local));
      }
    }
    RETURN_IF_ERROR(within.Wait());
  }
  return absl::OkStatus();
}

}  // namespace mpi_internal
}  // namespace strata
