// simgpu/nccl_shared.cc: see nccl_shared.h. The id holds a 16-byte tag and the file's path;
// the file begins with the same tag, so an id or file of anything else is refused.
#include "simgpu/nccl_shared.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace simgpu {
namespace nccl {
namespace {

constexpr char kTag[16] = {'s', 't', 'r', 'a', 't', 'a', '-', 's',
                           'i', 'm', 'n', 'c', 'c', 'l', '-', '1'};
constexpr size_t kMaxPathBytes = NCCL_UNIQUE_ID_BYTES - sizeof(kTag) - 1;  // and a NUL

struct Header {
  char tag[16];
  int32_t nranks;
  int32_t joined;
  int32_t failure_state;  // 0: none; 1: being written; 2: published
  int32_t failure_rank;
  char failure_text[2048];
};
static_assert(sizeof(Header) <= kPageBytes, "the header is one page");
static_assert(sizeof(RankControl) <= kPageBytes, "a rank's control is one page");
static_assert(sizeof(ChannelControl) <= kPageBytes, "a channel's control is one page");

size_t RankAreaBytes() { return kPageBytes + kSlotBytes; }
size_t ChannelAreaBytes() { return kPageBytes + kChannelBytes; }
size_t FileBytes(int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  return kPageBytes + n * RankAreaBytes() + n * n * ChannelAreaBytes();
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// $TMPDIR where the path fits the id, else /tmp.
std::string RendezvousDirectory(size_t name_bytes) {
  const char* tmpdir = std::getenv("TMPDIR");
  if (tmpdir != nullptr && tmpdir[0] == '/') {
    std::string dir = tmpdir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (dir.size() + 1 + name_bytes <= kMaxPathBytes) return dir;
  }
  return "/tmp";
}

// The first failure wins; the text is published after it is written.
void Publish(Header* header, int rank, const std::string& text) {
  if (!AtomicCompareExchange(&header->failure_state, 0, 1)) return;
  header->failure_rank = rank;
  std::snprintf(header->failure_text, sizeof(header->failure_text), "%s", text.c_str());
  AtomicStore(&header->failure_state, 2);
}

}  // namespace

ncclResult_t MakeRendezvous(ncclUniqueId* id, std::string* error) {
  const std::string prefix = "strata-simgpu-nccl-";
  const std::string dir = RendezvousDirectory(prefix.size() + 16);
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t random = 0;
    if (getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      *error = std::string("getrandom: ") + std::strerror(errno);
      return ncclSystemError;
    }
    char name[17];
    std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(random));
    const std::string path = dir + "/" + prefix + name;
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      *error = Errno("creating the rendezvous file", path);
      return ncclSystemError;
    }
    Header header = {};
    std::memcpy(header.tag, kTag, sizeof(kTag));
    const bool written = ftruncate(fd, kPageBytes) == 0 && pwrite(fd, &header, sizeof(header), 0) ==
                                                               static_cast<ssize_t>(sizeof(header));
    if (!written) {
      *error = Errno("writing the rendezvous file", path);
      close(fd);
      unlink(path.c_str());
      return ncclSystemError;
    }
    close(fd);
    std::memset(id->internal, 0, sizeof(id->internal));
    std::memcpy(id->internal, kTag, sizeof(kTag));
    std::memcpy(id->internal + sizeof(kTag), path.data(), path.size());
    return ncclSuccess;
  }
  *error = "no unused rendezvous file name in " + dir + " after 16 tries";
  return ncclSystemError;
}

ncclResult_t Rendezvous::Join(const ncclUniqueId& id, int nranks, int rank, int device,
                              std::unique_ptr<Rendezvous>* out, std::string* error) {
  if (std::memcmp(id.internal, kTag, sizeof(kTag)) != 0 ||
      std::memchr(id.internal + sizeof(kTag), '\0', kMaxPathBytes + 1) == nullptr) {
    *error = "the ncclUniqueId was not made by this library's ncclGetUniqueId";
    return ncclInvalidUsage;
  }
  std::unique_ptr<Rendezvous> joined(new Rendezvous());
  joined->path_ = id.internal + sizeof(kTag);
  joined->nranks_ = nranks;
  joined->rank_ = rank;
  const std::string& path = joined->path_;

  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const bool stale = errno == ENOENT;
    *error = Errno("opening the rendezvous file", path) +
             (stale ? " (every rank of this id already joined, a rank gave up waiting, or the "
                      "id comes from another machine)"
                    : "");
    return stale ? ncclInvalidUsage : ncclSystemError;
  }
  // The header page first: the file's size follows from nranks, which must be agreed.
  void* page = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    *error = Errno("mapping the rendezvous file", path);
    close(fd);
    return ncclSystemError;
  }
  Header* header = static_cast<Header*>(page);
  if (std::memcmp(header->tag, kTag, sizeof(kTag)) != 0) {
    *error = path + " is not a rendezvous file of this library";
    munmap(page, kPageBytes);
    close(fd);
    return ncclInvalidUsage;
  }
  if (!AtomicCompareExchange(&header->nranks, 0, nranks) && AtomicLoad(&header->nranks) != nranks) {
    const int agreed = AtomicLoad(&header->nranks);
    *error = "rank " + std::to_string(rank) + " joined with nranks " + std::to_string(nranks) +
             " but another rank with nranks " + std::to_string(agreed);
    Publish(header, rank, *error);  // the header page is all it needs: the others stop waiting
    unlink(path.c_str());           // the rendezvous cannot complete
    munmap(page, kPageBytes);
    close(fd);
    return ncclInvalidUsage;
  }
  munmap(page, kPageBytes);

  const size_t bytes = FileBytes(nranks);
  struct stat status;
  if (fstat(fd, &status) != 0 ||
      (static_cast<size_t>(status.st_size) < bytes && ftruncate(fd, bytes) != 0)) {
    *error = Errno("sizing the rendezvous file", path);
    close(fd);
    return ncclSystemError;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = Errno("mapping the rendezvous file", path);
    return ncclSystemError;
  }
  joined->base_ = static_cast<char*>(base);
  joined->bytes_ = bytes;

  RankControl* mine = joined->control(rank);
  if (!AtomicCompareExchange(&mine->claimed, 0, 1)) {
    *error = "rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
             " was claimed by two callers of ncclCommInitRankConfig";
    joined->PublishFailure(rank, *error);
    joined->Unlink();  // the rendezvous cannot complete
    return ncclInvalidUsage;
  }
  AtomicStore(&mine->pid, static_cast<int32_t>(getpid()));
  AtomicStore(&mine->device, static_cast<int32_t>(device));
  Header* shared = reinterpret_cast<Header*>(joined->base_);
  if (__atomic_add_fetch(&shared->joined, 1, __ATOMIC_ACQ_REL) == nranks) joined->Unlink();
  *out = std::move(joined);
  return ncclSuccess;
}

Rendezvous::~Rendezvous() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

int Rendezvous::Joined() const {
  return AtomicLoad(&reinterpret_cast<const Header*>(base_)->joined);
}

void Rendezvous::Unlink() {
  if (AtomicCompareExchange(&unlinked_, 0, 1)) unlink(path_.c_str());
}

RankControl* Rendezvous::control(int rank) const {
  return reinterpret_cast<RankControl*>(base_ + kPageBytes + rank * RankAreaBytes());
}

char* Rendezvous::slot(int rank) const {
  return base_ + kPageBytes + rank * RankAreaBytes() + kPageBytes;
}

ChannelControl* Rendezvous::channel(int from, int to) const {
  const size_t index = static_cast<size_t>(from) * nranks_ + to;
  return reinterpret_cast<ChannelControl*>(base_ + kPageBytes + nranks_ * RankAreaBytes() +
                                           index * ChannelAreaBytes());
}

char* Rendezvous::channel_data(int from, int to) const {
  return reinterpret_cast<char*>(channel(from, to)) + kPageBytes;
}

void Rendezvous::PublishFailure(int rank, const std::string& text) {
  Publish(reinterpret_cast<Header*>(base_), rank, text);
}

bool Rendezvous::Failure(int* rank, std::string* text) const {
  const Header* header = reinterpret_cast<const Header*>(base_);
  if (AtomicLoad(&header->failure_state) != 2) return false;
  *rank = header->failure_rank;
  *text = header->failure_text;
  return true;
}

std::string Rendezvous::DeadPeer(int rank) const {
  const int32_t pid = AtomicLoad(&control(rank)->pid);
  if (pid <= 0 || pid == getpid()) return "";
  if (kill(pid, 0) == 0 || errno != ESRCH) return "";
  return "rank " + std::to_string(rank) + "'s process (pid " + std::to_string(pid) + ") has exited";
}

}  // namespace nccl
}  // namespace simgpu
