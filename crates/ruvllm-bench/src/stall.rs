//! Stall watch: which part of a slow mask the measuring thread did not run at all.
//!
//! On the shared virtual machines the benchmarks run on, the virtual CPU is sometimes held
//! by the host for milliseconds. The guest cannot see it: its clocks go on, the time is
//! charged to the running thread as CPU time (so `CLOCK_THREAD_CPUTIME_ID` and
//! `getrusage` count it as work), and the kernel's steal counter did not move (5 ticks of
//! 10 ms over an hour of full runs; the profiled one held 643 ms of such gaps). A sampling
//! profiler shows them as holes: `perf record -F 4000 -k CLOCK_MONOTONIC` over a full run
//! took a sample every 0.250 ms (± 0.015) except in 33 gaps over 1 ms, two over 5 ms, and
//! an 8.5 ms mask of `Github_hard---o39444` held an 8.47 ms gap with no sample in it,
//! before and after which the samples were in `boundary::walk` (see docs/PERFORMANCE.md).
//!
//! The watch does what the profiler did, in the process: a POSIX timer sends the
//! measuring thread a real-time signal every period, and the handler stores when
//! it ran. A gap of more than two periods between two handler runs means the thread ran
//! nothing in between (not the handler either, which runs first when the thread resumes);
//! the gap, less the period in which the tick was due anyway, is recorded as a stall in a
//! small ring. A signal reaches the thread only when it returns to user space, so a
//! stretch of over two periods in the kernel on the thread's own behalf (a storm of page
//! faults, an allocator's purge) would count as a stall too; the profiled holds were not
//! that (the profiler, which samples the kernel too, had no sample at all in them), and
//! the threshold of two periods keeps such stretches rare. A shorter threshold was
//! considered for the holds it misses (a 6.6 ms mask of `Github_hard---o50114`, 0.3-0.6
//! ms alone, had none seen at 1,000 µs) and not taken, for that reason.
//!
//! A slow mask's stalled time is the overlap of its interval with the recorded stalls,
//! so the report can give, beside the wall-clock figures, how long each slow mask ran.
//! Only masks over the report's bound look at the ring, so the watch costs nothing per
//! mask; but a signal is dear on these machines: at one every 250 µs both engines'
//! mask and compile times rose by 14-17% (MaskBench's every 20th file, two pairs), as
//! under `perf record -F 4000`; at one every 1,000 µs by 1-4%, and stalls shorter than
//! about 2 ms go unseen. So the watch is off unless asked for
//! (`ruvllm-bench maskbench --stall-watch-us N`); the runs of docs/BENCHMARKS.md use
//! 1,000 µs, whose cost both engines bear alike.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The tick period of the running watch, ns.
static PERIOD_NS: AtomicU64 = AtomicU64::new(u64::MAX / 4);

/// Stalls kept (the latest; a slow mask only looks at the few in its own interval).
const RING: usize = 256;

/// When the handler last ran (`CLOCK_MONOTONIC` ns; 0 before the first tick).
static LAST: AtomicU64 = AtomicU64::new(0);
/// Stalls recorded so far (the ring's next slot is this modulo [`RING`]).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// (start, end) of each recorded stall, `CLOCK_MONOTONIC` ns.
static STALLS: [(AtomicU64, AtomicU64); RING] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; RING];

/// Clock `id` in nanoseconds (0 if the clock fails). Cost: a vDSO call for the
/// monotonic clock, a system call for a thread's CPU time. Async-signal-safe.
pub fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds (0 if the clock fails), the clock of the stalls.
/// Cost: a vDSO call. Async-signal-safe.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The signal handler: only a clock read and atomic stores (async-signal-safe).
extern "C" fn on_tick(_: libc::c_int) {
    let now = now_ns();
    let prev = LAST.swap(now, Ordering::Relaxed);
    let period = PERIOD_NS.load(Ordering::Relaxed);
    if prev != 0 && now > prev + 2 * period {
        let i = COUNT.load(Ordering::Relaxed);
        let slot = &STALLS[i % RING];
        slot.0.store(prev + period, Ordering::Relaxed);
        slot.1.store(now, Ordering::Relaxed);
        COUNT.store(i + 1, Ordering::Release);
    }
}

/// A running watch on the thread that started it; stops when dropped.
pub struct StallWatch {
    timer: libc::timer_t,
}

impl StallWatch {
    /// Starts ticking the calling thread every `period_ns` (at least 10 µs, under a
    /// second); one watch per process. A gap of more than two periods is a stall, so a
    /// stall shorter than that is not seen, and a stall's length is known to a period.
    /// `None` when the system refuses the signal or the timer. Cost: three system calls;
    /// then a signal per period on this thread (see the module docs: not cheap).
    pub fn start(period_ns: u64) -> Option<StallWatch> {
        let period_ns = period_ns.clamp(10_000, 999_999_999);
        PERIOD_NS.store(period_ns, Ordering::Relaxed);
        LAST.store(0, Ordering::Relaxed);
        let sig = libc::SIGRTMIN();
        // SAFETY: zeroed `sigaction`/`sigevent` are valid C structs; the handler is an
        // `extern "C" fn(c_int)` that only reads a clock and stores atomics, and the
        // pointers passed are valid for each call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_tick as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return None;
            }
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = sig;
            sev.sigev_notify_thread_id = libc::gettid();
            let mut timer: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) != 0 {
                return None;
            }
            let period = libc::timespec {
                tv_sec: 0,
                tv_nsec: period_ns as libc::c_long,
            };
            let spec = libc::itimerspec {
                it_interval: period,
                it_value: period,
            };
            if libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) != 0 {
                libc::timer_delete(timer);
                return None;
            }
            Some(StallWatch { timer })
        }
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        // SAFETY: `timer` was created by `timer_create` and is deleted once. A tick
        // already pending is still handled by `on_tick`, which stays installed.
        unsafe {
            libc::timer_delete(self.timer);
        }
    }
}

/// Nanoseconds of `[start, end]` (`CLOCK_MONOTONIC` ns) during which the watched thread
/// did not run, by the stalls recorded so far. Cost: one pass over the ring (256
/// entries); call it only for the few slow masks.
pub fn stalled_ns(start: u64, end: u64) -> u64 {
    let n = COUNT.load(Ordering::Acquire);
    (n.saturating_sub(RING)..n)
        .map(|i| {
            let slot = &STALLS[i % RING];
            let (a, b) = (
                slot.0.load(Ordering::Relaxed),
                slot.1.load(Ordering::Relaxed),
            );
            b.min(end).saturating_sub(a.max(start))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that gets no tick for 5 ms (its signal blocked, as a held virtual CPU
    /// gets none) has a stall of about that length recorded, and a busy loop of the same
    /// length with its ticks has none. Fails if the handler does not run, if gaps are not
    /// recorded, or if ordinary ticks are taken for stalls.
    #[test]
    fn missed_ticks_are_a_stall_and_work_is_not() {
        let period = 250_000;
        let _w = StallWatch::start(period).expect("timer");
        // Let a first tick set `LAST`.
        let t = now_ns();
        while now_ns() < t + 2 * period {}
        // A busy loop has its ticks. The thread may really be held, or preempted by the
        // tests running beside it, for a moment: a few tries, one of which must be clean.
        let clean = (0..5).any(|_| {
            let busy0 = now_ns();
            while now_ns() < busy0 + 5_000_000 {}
            stalled_ns(busy0, now_ns()) < 1_000_000
        });
        assert!(clean, "every busy loop looked stalled");
        // Blocking the signal makes the thread miss its ticks as a held CPU would; the
        // pending one is handled when it is unblocked.
        // SAFETY: plain signal-mask calls on valid sets.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGRTMIN());
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            let held0 = now_ns();
            while now_ns() < held0 + 5_000_000 {}
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            let held1 = now_ns();
            let s = stalled_ns(held0, held1);
            assert!(s > 3_500_000, "{s}");
        }
    }
}
