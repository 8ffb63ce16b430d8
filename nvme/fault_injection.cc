// FaultInjectingEngine; see fault_injection.h.
#include "nvme/fault_injection.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cerrno>
#include <thread>
#include <utility>

namespace strata::nvme {
namespace {

bool KindMatchesOp(const FaultRule& rule, IoOp op) {
  switch (rule.kind) {
    case FaultKind::kEnospc:
    case FaultKind::kShortWrite:
    case FaultKind::kTornWrite:
      return op == IoOp::kWrite;
    case FaultKind::kShortRead:
      return op == IoOp::kRead;
    case FaultKind::kEio:
    case FaultKind::kDelay:
      return !rule.op.has_value() || *rule.op == op;
  }
  return false;
}

uint64_t PrefixBytes(const FaultRule& rule, uint64_t length) {
  uint64_t prefix = rule.prefix_bytes > 0 ? rule.prefix_bytes : length / 2;
  prefix = prefix / kDirectIoAlignment * kDirectIoAlignment;
  if (prefix >= length) prefix = (length - 1) / kDirectIoAlignment * kDirectIoAlignment;
  return prefix;
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kEio:
      return "EIO";
    case FaultKind::kEnospc:
      return "ENOSPC";
    case FaultKind::kShortRead:
      return "short read";
    case FaultKind::kShortWrite:
      return "short write";
    case FaultKind::kTornWrite:
      return "torn write";
    case FaultKind::kDelay:
      return "delay";
  }
  return "?";
}

StatusOr<std::optional<FaultPlan>> ParseFaultPlan(const std::string& text) {
  if (text.empty()) return std::optional<FaultPlan>();
  const size_t at = text.find('@');
  const std::string kind = text.substr(0, at);
  FaultRule rule;
  if (kind == "eio_read") {
    rule.kind = FaultKind::kEio;
    rule.op = IoOp::kRead;
  } else if (kind == "eio_write") {
    rule.kind = FaultKind::kEio;
    rule.op = IoOp::kWrite;
  } else if (kind == "enospc") {
    rule.kind = FaultKind::kEnospc;
  } else if (kind == "short_read") {
    rule.kind = FaultKind::kShortRead;
  } else if (kind == "short_write") {
    rule.kind = FaultKind::kShortWrite;
  } else if (kind == "torn") {
    rule.kind = FaultKind::kTornWrite;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault plan '", text, "': unknown kind '", kind,
        "' (eio_read, eio_write, enospc, short_read, short_write, torn)"));
  }
  if (at == std::string::npos || !absl::SimpleAtoi(text.substr(at + 1), &rule.skip)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault plan '", text, "': expected KIND@N (N: extents let through first)"));
  }
  FaultPlan plan;
  plan.source = text;
  plan.rules.push_back(rule);
  return std::optional<FaultPlan>(plan);
}

FaultInjectingEngine::FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultPlan plan)
    : inner_(std::move(inner)), reorder_window_(plan.reorder_window) {
  for (const FaultRule& rule : plan.rules) AddRule(rule);
}

void FaultInjectingEngine::AddRule(const FaultRule& rule) { rules_.push_back({rule, 0, 0}); }

std::optional<FaultRule> FaultInjectingEngine::ChooseFault(const IoRequest& request) {
  for (RuleState& state : rules_) {
    const FaultRule& rule = state.rule;
    if (!KindMatchesOp(rule, request.op)) continue;
    if (rule.tag.has_value() && *rule.tag != request.tag) continue;
    if (state.hits >= rule.count) continue;
    if (state.matched++ < rule.skip) continue;
    ++state.hits;
    return rule;
  }
  return std::nullopt;
}

std::string FaultInjectingEngine::Describe(const IoRequest& request) const {
  return absl::StrFormat("nvme: %s of %s at offset %d, length %d [injected fault]",
                         IoOpName(request.op), FileName(request.file), request.offset,
                         request.length);
}

Status FaultInjectingEngine::Submit(absl::Span<const IoRequest> requests) {
  for (const IoRequest& request : requests) {
    if (request.length == 0 || request.buffer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: empty extent or null buffer, batch rejected", Describe(request)));
    }
  }
  const std::vector<RuleState> rules_before = rules_;
  std::vector<IoRequest> inner_requests;
  std::vector<std::pair<uint64_t, Forwarded>> forwarded;
  std::vector<IoCompletion> immediate;  // faults that never reach the inner engine
  for (const IoRequest& request : requests) {
    std::optional<FaultRule> fault = ChooseFault(request);
    Forwarded entry;
    entry.outer = request;
    IoRequest inner_request = request;
    if (fault.has_value()) {
      entry.fault = fault->kind;
      IoCompletion completion;
      completion.tag = request.tag;
      completion.op = request.op;
      completion.file = request.file;
      completion.offset = request.offset;
      completion.length = request.length;
      switch (fault->kind) {
        case FaultKind::kEio:
          completion.status = ErrnoError(EIO, Describe(request));
          immediate.push_back(std::move(completion));
          continue;
        case FaultKind::kEnospc:
          completion.status = ErrnoError(ENOSPC, Describe(request));
          immediate.push_back(std::move(completion));
          continue;
        case FaultKind::kShortRead:
        case FaultKind::kShortWrite:
        case FaultKind::kTornWrite:
          entry.prefix_bytes = PrefixBytes(*fault, request.length);
          if (entry.prefix_bytes == 0) {  // nothing to transfer: answer right away
            if (fault->kind == FaultKind::kTornWrite) {
              completion.bytes_transferred = request.length;
            } else {
              completion.status = absl::DataLossError(
                  absl::StrFormat("%s: short %s: 0 of %d bytes transferred", Describe(request),
                                  IoOpName(request.op), request.length));
            }
            immediate.push_back(std::move(completion));
            continue;
          }
          inner_request.length = entry.prefix_bytes;
          break;
        case FaultKind::kDelay:
          entry.delay = fault->delay;
          break;
      }
    }
    inner_request.tag = next_inner_tag_ + inner_requests.size();
    forwarded.emplace_back(inner_request.tag, entry);
    inner_requests.push_back(inner_request);
  }
  Status submitted = inner_->Submit(inner_requests);
  if (!submitted.ok()) {
    rules_ = rules_before;  // all or nothing, like the engines
    return submitted;
  }
  next_inner_tag_ += inner_requests.size();
  for (auto& [tag, entry] : forwarded) forwarded_.emplace(tag, std::move(entry));
  for (IoCompletion& completion : immediate) {
    if (completion.status.ok()) {  // a torn write of which nothing reached the file
      ++fault_stats_.torn_writes;
      fault_stats_.torn.push_back(
          {completion.file, completion.offset, completion.length, 0, completion.tag});
    } else if (completion.status.code() == absl::StatusCode::kDataLoss) {
      ++(completion.op == IoOp::kRead ? fault_stats_.short_reads : fault_stats_.short_writes);
    } else if (completion.status.code() == absl::StatusCode::kResourceExhausted) {
      ++fault_stats_.enospc;
    } else {
      ++fault_stats_.eio;
    }
    Deliver(std::move(completion));
  }
  return Status();
}

void FaultInjectingEngine::OnInnerCompletion(IoCompletion inner_completion) {
  auto found = forwarded_.find(inner_completion.tag);
  if (found == forwarded_.end()) return;  // not ours: cannot happen
  Forwarded entry = std::move(found->second);
  forwarded_.erase(found);
  const IoRequest& request = entry.outer;
  IoCompletion completion = std::move(inner_completion);
  completion.tag = request.tag;
  completion.offset = request.offset;
  completion.length = request.length;
  if (entry.fault.has_value() && completion.status.ok()) {
    switch (*entry.fault) {
      case FaultKind::kShortRead:
      case FaultKind::kShortWrite:
        completion.status = absl::DataLossError(
            absl::StrFormat("%s: short %s: %d of %d bytes transferred", Describe(request),
                            IoOpName(request.op), entry.prefix_bytes, request.length));
        completion.bytes_transferred = entry.prefix_bytes;
        ++(request.op == IoOp::kRead ? fault_stats_.short_reads : fault_stats_.short_writes);
        break;
      case FaultKind::kTornWrite:
        completion.bytes_transferred = request.length;  // the lie a torn write tells
        ++fault_stats_.torn_writes;
        fault_stats_.torn.push_back(
            {request.file, request.offset, request.length, entry.prefix_bytes, request.tag});
        break;
      default:
        break;
    }
  }
  if (entry.delay.count() > 0) {
    ++fault_stats_.delayed;
    delayed_.push_back({std::move(completion), std::chrono::steady_clock::now() + entry.delay});
    return;
  }
  Deliver(std::move(completion));
}

void FaultInjectingEngine::Deliver(IoCompletion completion) {
  if (reorder_window_ <= 1) {
    ready_.push_back(std::move(completion));
    return;
  }
  grouped_.push_back(std::move(completion));
  if (grouped_.size() >= reorder_window_) {
    if (grouped_.size() > 1) ++fault_stats_.reordered_groups;
    for (auto it = grouped_.rbegin(); it != grouped_.rend(); ++it) {
      ready_.push_back(std::move(*it));
    }
    grouped_.clear();
  }
}

void FaultInjectingEngine::Progress(bool release_all_delayed) {
  std::vector<IoCompletion> inner_completions;
  inner_->Poll(&inner_completions);
  for (IoCompletion& completion : inner_completions) OnInnerCompletion(std::move(completion));
  const auto now = std::chrono::steady_clock::now();
  // Release due delays in the order they become due.
  std::stable_sort(delayed_.begin(), delayed_.end(),
                   [](const Delayed& a, const Delayed& b) { return a.release_at < b.release_at; });
  size_t released = 0;
  while (released < delayed_.size() &&
         (release_all_delayed || delayed_[released].release_at <= now)) {
    Deliver(std::move(delayed_[released].completion));
    ++released;
  }
  delayed_.erase(delayed_.begin(), delayed_.begin() + released);
  // Nothing else can join the group: release it rather than hold it forever.
  if (!grouped_.empty() && forwarded_.empty() && delayed_.empty()) {
    if (grouped_.size() > 1) ++fault_stats_.reordered_groups;
    for (auto it = grouped_.rbegin(); it != grouped_.rend(); ++it) {
      ready_.push_back(std::move(*it));
    }
    grouped_.clear();
  }
}

size_t FaultInjectingEngine::Poll(std::vector<IoCompletion>* completions) {
  Progress(false);
  const size_t count = ready_.size();
  for (IoCompletion& completion : ready_) completions->push_back(std::move(completion));
  ready_.clear();
  return count;
}

Status FaultInjectingEngine::Wait(size_t min_completions, std::chrono::milliseconds timeout,
                                  std::vector<IoCompletion>* completions) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  Progress(false);
  const size_t target = std::min(min_completions, Outstanding());
  Status status;
  while (ready_.size() < target) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    auto wake = deadline;
    for (const Delayed& delayed : delayed_) wake = std::min(wake, delayed.release_at);
    if (!forwarded_.empty()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake - now);
      std::vector<IoCompletion> inner_completions;
      Status inner = inner_->Wait(1, wait, &inner_completions);
      for (IoCompletion& completion : inner_completions) {
        OnInnerCompletion(std::move(completion));
      }
      if (!inner.ok() && inner.code() != absl::StatusCode::kDeadlineExceeded) {
        status = inner;
        break;
      }
    } else {
      std::this_thread::sleep_until(wake);
    }
    Progress(false);
  }
  const size_t available = ready_.size();
  for (IoCompletion& completion : ready_) completions->push_back(std::move(completion));
  ready_.clear();
  if (!status.ok()) return status;
  if (available < target) {
    return absl::DeadlineExceededError(
        absl::StrFormat("nvme: fault-injecting engine: waited %d ms for %d completions, got %d",
                        timeout.count(), min_completions, available));
  }
  return Status();
}

Status FaultInjectingEngine::Drain() {
  Status drained = inner_->Drain();
  Progress(true);
  return drained;
}

}  // namespace strata::nvme
