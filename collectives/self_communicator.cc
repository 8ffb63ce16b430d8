// See self_communicator.h.
#include "collectives/self_communicator.h"

#include <atomic>
#include <string>

namespace strata {
namespace {

class SelfCommunicator : public CheckedCommunicator {
 public:
  explicit SelfCommunicator(Device& device) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void Abort(const std::string&) override {}  // nobody to tell
  std::string Describe() const override {
    return "self rank 0 of 1 on " + device_.Describe();
  }

 protected:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override {
    const bool moves = call.op == CollectiveOp::kReduceScatter ||
                       call.op == CollectiveOp::kAllGather;
    if (!moves || input == output || call.count == 0) return absl::OkStatus();
    return device_.CopyAsync(output, input, call.count * DTypeBytes(call.dtype), stream);
  }

 private:
  Device& device_;
};

}  // namespace

std::unique_ptr<Communicator> CreateSelfCommunicator(Device& device) {
  return std::make_unique<SelfCommunicator>(device);
}

}  // namespace strata
