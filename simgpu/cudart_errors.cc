// simgpu/cudart_errors.cc: cudaGetErrorName and cudaGetErrorString for every cudaError_t of
// the toolkit's driver_types.h. The strings of the codes strata meets are the runtime's own
// wording; the others are the name in words ("cudaErrorLaunchTimeout" -> "launch timeout").
// Thread-safety: both functions are thread-safe (the table is built once).
#include <cuda_runtime_api.h>

#include <cctype>
#include <string>
#include <unordered_map>

namespace {

struct ErrorText {
  std::string name;
  std::string description;
};

// "cudaErrorInvalidResourceHandle" -> "invalid resource handle".
std::string InWords(const std::string& name) {
  const std::string prefix = "cudaError";
  std::string words;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    const bool upper = std::isupper(static_cast<unsigned char>(c)) != 0;
    const bool after_lower = i > prefix.size() && !std::isupper(static_cast<unsigned char>(name[i - 1]));
    if (upper && after_lower) words += ' ';
    words += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return words;
}

const std::unordered_map<int, ErrorText>& Table() {
  static const auto* table = [] {
    auto* made = new std::unordered_map<int, ErrorText>();
#define SIMGPU_ERROR(code) made->emplace(code, ErrorText{#code, InWords(#code)});
    SIMGPU_ERROR(cudaSuccess)
    SIMGPU_ERROR(cudaErrorInvalidValue)
    SIMGPU_ERROR(cudaErrorMemoryAllocation)
    SIMGPU_ERROR(cudaErrorInitializationError)
    SIMGPU_ERROR(cudaErrorCudartUnloading)
    SIMGPU_ERROR(cudaErrorProfilerDisabled)
    SIMGPU_ERROR(cudaErrorProfilerNotInitialized)
    SIMGPU_ERROR(cudaErrorProfilerAlreadyStarted)
    SIMGPU_ERROR(cudaErrorProfilerAlreadyStopped)
    SIMGPU_ERROR(cudaErrorInvalidConfiguration)
    SIMGPU_ERROR(cudaErrorInvalidPitchValue)
    SIMGPU_ERROR(cudaErrorInvalidSymbol)
    SIMGPU_ERROR(cudaErrorInvalidHostPointer)
    SIMGPU_ERROR(cudaErrorInvalidDevicePointer)
    SIMGPU_ERROR(cudaErrorInvalidTexture)
    SIMGPU_ERROR(cudaErrorInvalidTextureBinding)
    SIMGPU_ERROR(cudaErrorInvalidChannelDescriptor)
    SIMGPU_ERROR(cudaErrorInvalidMemcpyDirection)
    SIMGPU_ERROR(cudaErrorAddressOfConstant)
    SIMGPU_ERROR(cudaErrorTextureFetchFailed)
    SIMGPU_ERROR(cudaErrorTextureNotBound)
    SIMGPU_ERROR(cudaErrorSynchronizationError)
    SIMGPU_ERROR(cudaErrorInvalidFilterSetting)
    SIMGPU_ERROR(cudaErrorInvalidNormSetting)
    SIMGPU_ERROR(cudaErrorMixedDeviceExecution)
    SIMGPU_ERROR(cudaErrorNotYetImplemented)
    SIMGPU_ERROR(cudaErrorMemoryValueTooLarge)
    SIMGPU_ERROR(cudaErrorStubLibrary)
    SIMGPU_ERROR(cudaErrorInsufficientDriver)
    SIMGPU_ERROR(cudaErrorCallRequiresNewerDriver)
    SIMGPU_ERROR(cudaErrorInvalidSurface)
    SIMGPU_ERROR(cudaErrorDuplicateVariableName)
    SIMGPU_ERROR(cudaErrorDuplicateTextureName)
    SIMGPU_ERROR(cudaErrorDuplicateSurfaceName)
    SIMGPU_ERROR(cudaErrorDevicesUnavailable)
    SIMGPU_ERROR(cudaErrorIncompatibleDriverContext)
    SIMGPU_ERROR(cudaErrorMissingConfiguration)
    SIMGPU_ERROR(cudaErrorPriorLaunchFailure)
    SIMGPU_ERROR(cudaErrorLaunchMaxDepthExceeded)
    SIMGPU_ERROR(cudaErrorLaunchFileScopedTex)
    SIMGPU_ERROR(cudaErrorLaunchFileScopedSurf)
    SIMGPU_ERROR(cudaErrorSyncDepthExceeded)
    SIMGPU_ERROR(cudaErrorLaunchPendingCountExceeded)
    SIMGPU_ERROR(cudaErrorInvalidDeviceFunction)
    SIMGPU_ERROR(cudaErrorNoDevice)
    SIMGPU_ERROR(cudaErrorInvalidDevice)
    SIMGPU_ERROR(cudaErrorDeviceNotLicensed)
    SIMGPU_ERROR(cudaErrorSoftwareValidityNotEstablished)
    SIMGPU_ERROR(cudaErrorStartupFailure)
    SIMGPU_ERROR(cudaErrorInvalidKernelImage)
    SIMGPU_ERROR(cudaErrorDeviceUninitialized)
    SIMGPU_ERROR(cudaErrorMapBufferObjectFailed)
    SIMGPU_ERROR(cudaErrorUnmapBufferObjectFailed)
    SIMGPU_ERROR(cudaErrorArrayIsMapped)
    SIMGPU_ERROR(cudaErrorAlreadyMapped)
    SIMGPU_ERROR(cudaErrorNoKernelImageForDevice)
    SIMGPU_ERROR(cudaErrorAlreadyAcquired)
    SIMGPU_ERROR(cudaErrorNotMapped)
    SIMGPU_ERROR(cudaErrorNotMappedAsArray)
    SIMGPU_ERROR(cudaErrorNotMappedAsPointer)
    SIMGPU_ERROR(cudaErrorECCUncorrectable)
    SIMGPU_ERROR(cudaErrorUnsupportedLimit)
    SIMGPU_ERROR(cudaErrorDeviceAlreadyInUse)
    SIMGPU_ERROR(cudaErrorPeerAccessUnsupported)
    SIMGPU_ERROR(cudaErrorInvalidPtx)
    SIMGPU_ERROR(cudaErrorInvalidGraphicsContext)
    SIMGPU_ERROR(cudaErrorNvlinkUncorrectable)
    SIMGPU_ERROR(cudaErrorJitCompilerNotFound)
    SIMGPU_ERROR(cudaErrorUnsupportedPtxVersion)
    SIMGPU_ERROR(cudaErrorJitCompilationDisabled)
    SIMGPU_ERROR(cudaErrorUnsupportedExecAffinity)
    SIMGPU_ERROR(cudaErrorUnsupportedDevSideSync)
    SIMGPU_ERROR(cudaErrorContained)
    SIMGPU_ERROR(cudaErrorInvalidSource)
    SIMGPU_ERROR(cudaErrorFileNotFound)
    SIMGPU_ERROR(cudaErrorSharedObjectSymbolNotFound)
    SIMGPU_ERROR(cudaErrorSharedObjectInitFailed)
    SIMGPU_ERROR(cudaErrorOperatingSystem)
    SIMGPU_ERROR(cudaErrorInvalidResourceHandle)
    SIMGPU_ERROR(cudaErrorIllegalState)
    SIMGPU_ERROR(cudaErrorLossyQuery)
    SIMGPU_ERROR(cudaErrorSymbolNotFound)
    SIMGPU_ERROR(cudaErrorNotReady)
    SIMGPU_ERROR(cudaErrorIllegalAddress)
    SIMGPU_ERROR(cudaErrorLaunchOutOfResources)
    SIMGPU_ERROR(cudaErrorLaunchTimeout)
    SIMGPU_ERROR(cudaErrorLaunchIncompatibleTexturing)
    SIMGPU_ERROR(cudaErrorPeerAccessAlreadyEnabled)
    SIMGPU_ERROR(cudaErrorPeerAccessNotEnabled)
    SIMGPU_ERROR(cudaErrorSetOnActiveProcess)
    SIMGPU_ERROR(cudaErrorContextIsDestroyed)
    SIMGPU_ERROR(cudaErrorAssert)
    SIMGPU_ERROR(cudaErrorTooManyPeers)
    SIMGPU_ERROR(cudaErrorHostMemoryAlreadyRegistered)
    SIMGPU_ERROR(cudaErrorHostMemoryNotRegistered)
    SIMGPU_ERROR(cudaErrorHardwareStackError)
    SIMGPU_ERROR(cudaErrorIllegalInstruction)
    SIMGPU_ERROR(cudaErrorMisalignedAddress)
    SIMGPU_ERROR(cudaErrorInvalidAddressSpace)
    SIMGPU_ERROR(cudaErrorInvalidPc)
    SIMGPU_ERROR(cudaErrorLaunchFailure)
    SIMGPU_ERROR(cudaErrorCooperativeLaunchTooLarge)
    SIMGPU_ERROR(cudaErrorTensorMemoryLeak)
    SIMGPU_ERROR(cudaErrorNotPermitted)
    SIMGPU_ERROR(cudaErrorNotSupported)
    SIMGPU_ERROR(cudaErrorSystemNotReady)
    SIMGPU_ERROR(cudaErrorSystemDriverMismatch)
    SIMGPU_ERROR(cudaErrorCompatNotSupportedOnDevice)
    SIMGPU_ERROR(cudaErrorMpsConnectionFailed)
    SIMGPU_ERROR(cudaErrorMpsRpcFailure)
    SIMGPU_ERROR(cudaErrorMpsServerNotReady)
    SIMGPU_ERROR(cudaErrorMpsMaxClientsReached)
    SIMGPU_ERROR(cudaErrorMpsMaxConnectionsReached)
    SIMGPU_ERROR(cudaErrorMpsClientTerminated)
    SIMGPU_ERROR(cudaErrorCdpNotSupported)
    SIMGPU_ERROR(cudaErrorCdpVersionMismatch)
    SIMGPU_ERROR(cudaErrorStreamCaptureUnsupported)
    SIMGPU_ERROR(cudaErrorStreamCaptureInvalidated)
    SIMGPU_ERROR(cudaErrorStreamCaptureMerge)
    SIMGPU_ERROR(cudaErrorStreamCaptureUnmatched)
    SIMGPU_ERROR(cudaErrorStreamCaptureUnjoined)
    SIMGPU_ERROR(cudaErrorStreamCaptureIsolation)
    SIMGPU_ERROR(cudaErrorStreamCaptureImplicit)
    SIMGPU_ERROR(cudaErrorCapturedEvent)
    SIMGPU_ERROR(cudaErrorStreamCaptureWrongThread)
    SIMGPU_ERROR(cudaErrorTimeout)
    SIMGPU_ERROR(cudaErrorGraphExecUpdateFailure)
    SIMGPU_ERROR(cudaErrorExternalDevice)
    SIMGPU_ERROR(cudaErrorInvalidClusterSize)
    SIMGPU_ERROR(cudaErrorFunctionNotLoaded)
    SIMGPU_ERROR(cudaErrorInvalidResourceType)
    SIMGPU_ERROR(cudaErrorInvalidResourceConfiguration)
    SIMGPU_ERROR(cudaErrorUnknown)
#undef SIMGPU_ERROR
    const std::pair<cudaError_t, const char*> worded[] = {
        {cudaSuccess, "no error"},
        {cudaErrorInvalidValue, "invalid argument"},
        {cudaErrorMemoryAllocation, "out of memory"},
        {cudaErrorInitializationError, "initialization error"},
        {cudaErrorInvalidDevice, "invalid device ordinal"},
        {cudaErrorInvalidDevicePointer, "invalid device pointer"},
        {cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
        {cudaErrorInvalidResourceHandle, "invalid resource handle"},
        {cudaErrorNotReady, "device not ready"},
        {cudaErrorLaunchFailure, "unspecified launch failure"},
        {cudaErrorIllegalAddress, "an illegal memory access was encountered"},
        {cudaErrorNoDevice, "no CUDA-capable device is detected"},
        {cudaErrorInvalidConfiguration, "invalid configuration argument"},
        {cudaErrorInvalidDeviceFunction, "invalid device function"},
        {cudaErrorLaunchOutOfResources, "too many resources requested for launch"},
        {cudaErrorHostMemoryAlreadyRegistered,
         "part or all of the requested memory range is already mapped"},
        {cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"},
        {cudaErrorNotSupported, "operation not supported"},
        {cudaErrorSymbolNotFound, "named symbol not found"},
        {cudaErrorUnknown, "unknown error"},
    };
    for (const auto& [code, text] : worded) (*made)[code].description = text;
    return made;
  }();
  return *table;
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  auto it = Table().find(error);
  return it == Table().end() ? "cudaErrorUnknown" : it->second.name.c_str();
}

const char* cudaGetErrorString(cudaError_t error) {
  auto it = Table().find(error);
  return it == Table().end() ? "unrecognized error code" : it->second.description.c_str();
}

}  // extern "C"
