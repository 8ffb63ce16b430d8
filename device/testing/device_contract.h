// Promises every Device keeps, as test bodies run on each device (the CPU device in CI,
// the CUDA device where a GPU is present): the same assertions, typed over the device.
// Thread-safety: test code.
#pragma once

#include "device/device.h"

namespace strata::testing {

// Freed buffers are reused: after one round of the sizes a step allocates, further rounds
// make no driver call (Device::driver_calls), in both tiers.
void ExpectSteadyStateMakesNoDriverCalls(Device& device);

// A freed buffer is not handed out again while a stream is still behind the moment it was
// freed (that stream might still use it); once the stream has passed, it is.
void ExpectNoReuseWhileAStreamIsBehind(Device& device);

// Each stream's host work runs on its own: host work of one stream may wait for host work
// of another enqueued later (no shared callback thread to deadlock on), and may enqueue
// device work; nothing hangs (a 20 s watchdog fails the test instead).
void ExpectHostWorkOfStreamsIsIndependent(Device& device);

// A stream's idle time over a window (IdleMeter): the time it sat drained while the thread
// feeding it blocked on another stream's event, plus the time it waited on an event, within
// bounds wide enough for a loaded machine (sleeps of 30-120 ms).
void ExpectIdleTimeCountsStarvationAndStalls(Device& device);

// A traced device (Device::SetTrace): each stream's work shows under the label current
// when it was enqueued (StreamLabel), consecutive work of one label as one span; a wait on
// another stream's event shows as a "wait" span naming that stream, and the waits add up
// to the stream's stalled_ms; nested labels name their outer one; nothing while the trace
// is not recording.
void ExpectTracedStreamsShowLabelsAndWaits(Device& device);

}  // namespace strata::testing
