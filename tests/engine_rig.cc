// See engine_rig.h.
#include "tests/engine_rig.h"

#include "collectives/local_communicator.h"

namespace strata {

StatusOr<std::unique_ptr<EngineRig>> MakeEngineRig(const Options& options) {
  auto rig = std::make_unique<EngineRig>();
  ASSIGN_OR_RETURN(rig->group, CreateLocalGroup(1, LocalGroupOptions{}));
  ASSIGN_OR_RETURN(rig->backend, CreateBackend(options));
  ASSIGN_OR_RETURN(rig->model,
                   CreateModel(options.model, options.train.recompute, options.train.dtype,
                               options.lora));
  ASSIGN_OR_RETURN(const EngineConfig config, EngineConfig::From(options, 1));
  ASSIGN_OR_RETURN(rig->engine, Engine::Create(config, rig->backend.device.get(),
                                               rig->backend.ops.get(),
                                               rig->backend.host_ops.get(), rig->model.get(),
                                               rig->group[0].get()));
  return rig;
}

}  // namespace strata
