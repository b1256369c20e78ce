// parallel_for on persistent worker threads.
//
// Workers are created on first use (up to get_num_threads() - 1) and then sleep on a
// condition variable between regions, so a parallel region costs a wake-up, not a thread
// creation. One region runs at a time: a call that finds the workers busy (another
// Python thread, or a nested call from inside a region) runs its loop on its own thread,
// so the process never has more busy threads than cores. After fork() the child starts
// with fresh, not yet created workers.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "detail/parallel.hpp"
#include "sketchcore/execution.hpp"

namespace sketchcore::detail {

namespace {

thread_local bool t_inside_region = false;

/// Chunks per thread of a parallel_for (see there).
constexpr int kChunksPerThread = 4;

/// One parallel region: lives on the stack of the thread that runs it, which returns only
/// after every worker that joined has left, so no worker ever touches a finished region.
struct Region {
  const std::function<void(std::int64_t, std::int64_t)>* body = nullptr;
  std::int64_t n = 0, step = 0, chunks = 0;
  std::atomic<std::int64_t> next_chunk{0};
  std::int64_t pending = 0;  // chunks not yet finished (guarded by Workers::mutex_)
  int active_workers = 0;    // workers inside this region (guarded by Workers::mutex_)
  int max_workers = 0;       // threads - 1: the workers beyond (after a smaller set_num_threads) stay asleep
  std::exception_ptr error;  // first exception of a chunk (guarded by Workers::mutex_)
};

class Workers {
 public:
  /// Runs body on chunks [c·step, min(n, (c+1)·step)) for c in [0, chunks), the caller
  /// taking part. Returns false (running nothing) if another region holds the workers.
  bool run(std::int64_t n, std::int64_t chunks, std::int64_t step, int threads,
           const std::function<void(std::int64_t, std::int64_t)>& body) {
    std::unique_lock<std::mutex> region_lock(region_mutex_, std::try_to_lock);
    if (!region_lock.owns_lock()) return false;
    ensure_workers(static_cast<int>(std::min<std::int64_t>(threads, chunks)) - 1);
    Region region;
    region.body = &body;
    region.n = n;
    region.step = step;
    region.chunks = chunks;
    region.pending = chunks;
    region.max_workers = threads - 1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = &region;
      ++generation_;
    }
    wake_.notify_all();
    work(region);  // the caller takes chunks too
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return region.pending == 0 && region.active_workers == 0; });
    current_ = nullptr;
    if (region.error) std::rethrow_exception(region.error);
    return true;
  }

 private:
  void ensure_workers(int wanted) {
    while (static_cast<int>(threads_.size()) < wanted) {
      threads_.emplace_back([this] { loop(); });
      threads_.back().detach();  // parked on wake_ between regions; never joined
    }
  }

  void loop() {
    t_inside_region = true;
    std::uint64_t seen = 0;
    for (;;) {
      Region* region;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && current_ != nullptr; });
        seen = generation_;
        region = current_;
        if (region->active_workers >= region->max_workers) continue;
        ++region->active_workers;
      }
      work(*region);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--region->active_workers == 0 && region->pending == 0) done_.notify_all();
    }
  }

  void work(Region& region) {
    for (;;) {
      const std::int64_t c = region.next_chunk.fetch_add(1);
      if (c >= region.chunks) return;
      const std::int64_t begin = c * region.step, end = std::min(region.n, begin + region.step);
      std::exception_ptr error;
      if (begin < end) {
        try {
          (*region.body)(begin, end);
        } catch (...) {
          error = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !region.error) region.error = error;
      if (--region.pending == 0) done_.notify_all();
    }
  }

  std::mutex region_mutex_;  // one region at a time
  std::mutex mutex_;         // guards current_, generation_ and the regions' counters
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  Region* current_ = nullptr;
  std::uint64_t generation_ = 0;
};

Workers& workers() {
  // Leaked on purpose (detached threads use it until the process ends); replaced in a
  // forked child, whose copy of the parent's workers has no threads behind it.
  static std::atomic<Workers*> instance{nullptr};
  static std::atomic<pid_t> owner{0};
  static std::mutex creation;
  const pid_t pid = getpid();
  Workers* w = instance.load(std::memory_order_acquire);
  if (w == nullptr || owner.load() != pid) {
    std::lock_guard<std::mutex> lock(creation);
    w = instance.load();
    if (w == nullptr || owner.load() != pid) {
      w = new Workers();
      instance.store(w, std::memory_order_release);
      owner.store(pid);
    }
  }
  return *w;
}

/// One parallel_for on an OpenMP runtime's threads (see CpuGemmProvider::gomp_parallel): the
/// team takes chunks first come first served, as the workers do.
struct OpenMpRegion {
  const std::function<void(std::int64_t, std::int64_t)>* body;
  std::int64_t n, step, chunks;
  std::atomic<std::int64_t> next_chunk{0};
  std::mutex mutex;
  std::exception_ptr error;

  static void run(void* data) {
    auto& region = *static_cast<OpenMpRegion*>(data);
    const bool was_inside = t_inside_region;
    t_inside_region = true;  // a nested parallel_for runs inline
    for (;;) {
      const std::int64_t c = region.next_chunk.fetch_add(1);
      if (c >= region.chunks) break;
      const std::int64_t begin = c * region.step, end = std::min(region.n, begin + region.step);
      if (begin >= end) continue;
      try {
        (*region.body)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(region.mutex);
        if (!region.error) region.error = std::current_exception();
      }
    }
    t_inside_region = was_inside;
  }
};

using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);

}  // namespace

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  const std::int64_t max_chunks = std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1));
  const int threads = current_num_threads();
  // Several chunks per thread, taken first come first served: a worker that wakes late (a
  // sleeping vCPU, or a core still held by BLAS's spinning threads after a GEMM: measured up
  // to milliseconds on the 2-core VM) still takes a share instead of finding all chunks gone.
  const std::int64_t chunks = threads <= 1 ? 1 : std::min<std::int64_t>(std::int64_t{kChunksPerThread} * threads, max_chunks);
  if (chunks <= 1 || t_inside_region) {
    body(0, n);
    return;
  }
  const std::int64_t step = (n + chunks - 1) / chunks;
  const CpuGemmProvider* provider = current_execution().cpu_gemm;
  if (provider && provider->gomp_parallel) {  // the team of the runtime, its default size
    OpenMpRegion region;
    region.body = &body;
    region.n = n;
    region.step = step;
    region.chunks = chunks;
    reinterpret_cast<GompParallel>(provider->gomp_parallel)(&OpenMpRegion::run, &region, 0, 0);
    if (region.error) std::rethrow_exception(region.error);
    return;
  }
  t_inside_region = true;
  struct Reset {
    ~Reset() { t_inside_region = false; }
  } reset;
  if (!workers().run(n, chunks, step, threads, body)) body(0, n);
}

}  // namespace sketchcore::detail
