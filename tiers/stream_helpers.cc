// See stream_helpers.h.
#include "tiers/stream_helpers.h"

#include <cstring>

namespace strata {

StatusOr<std::vector<std::unique_ptr<Event>>> MakeEvents(Device& device, size_t count) {
  std::vector<std::unique_ptr<Event>> events;
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device.CreateEvent());
    events.push_back(std::move(event));
  }
  return events;
}

StatusOr<Buffer> AllocateZeroedIn(const HomeContext& ctx, Tier tier, StateKind kind,
                                  size_t bytes, const std::string& what) {
  ASSIGN_OR_RETURN(Buffer buffer, ctx.device->Allocate(tier, kind, bytes, what));
  // Host memory the host may write is zeroed here; a dry run's (untouched address space,
  // not host-accessible) goes to the device's memset, which only counts it: a memset here
  // would commit the plan's whole host state.
  if (tier == Tier::kHost && ctx.device->HostAccessible(Tier::kHost)) {
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

}  // namespace strata
