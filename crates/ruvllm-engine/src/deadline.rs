//! The clock of one mask step: a time budget read cheaply. It owns nothing and uses only
//! the error type, so every layer that does bounded work (the boundary walk, the budget
//! mask, the matcher) can take one.

use std::time::{Duration, Instant};

use crate::error::MatchError;

/// The mask-time budget of one step ([`crate::Limits::max_mask_time`]).
///
/// Reading the clock costs about 50 ns (`Instant::now` on the 2-core Xeon), so it is read
/// once at the start of a mask, before each first-use token table (one trie walk,
/// milliseconds at most), and after every [`Deadline::EVERY`] units of other work (parser
/// items built by the boundary walk, table lookups). A step thus overshoots the budget by
/// at most one table or that much work.
pub(crate) struct Deadline {
    end: Option<Instant>,
    limit: Duration,
    work: usize,
}

impl Deadline {
    /// Work units between two looks at the clock.
    const EVERY: usize = 4096;

    /// A budget of `limit` from now.
    pub(crate) fn new(limit: Duration) -> Deadline {
        Deadline {
            end: Instant::now().checked_add(limit),
            limit,
            work: 0,
        }
    }

    /// A budget of `limit` from now that also ends when this one does: a share of a
    /// larger budget (the completion search's steps share one). Cost: one clock read.
    pub(crate) fn within(&self, limit: Duration) -> Deadline {
        let own = Instant::now().checked_add(limit);
        Deadline {
            end: match (self.end, own) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            limit: self.limit,
            work: 0,
        }
    }

    /// The time left before this budget ends (`None`: it never does). Cost: one clock
    /// read.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.end
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// Counts `units` of work; looks at the clock once enough has accumulated.
    #[inline]
    pub(crate) fn tick(&mut self, units: usize) -> Result<(), MatchError> {
        self.work += units;
        if self.work >= Self::EVERY {
            self.work = 0;
            self.check()
        } else {
            Ok(())
        }
    }

    /// Fails with [`MatchError::MaskTime`] when the budget has run out.
    pub(crate) fn check(&self) -> Result<(), MatchError> {
        match self.end {
            Some(end) if Instant::now() >= end => Err(MatchError::MaskTime {
                limit_ms: self.limit.as_millis() as u64,
            }),
            _ => Ok(()),
        }
    }
}
