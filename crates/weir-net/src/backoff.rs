//! The pause after an accept error that may persist.

use std::time::Duration;

/// A bounded, doubling delay: [`Backoff::FIRST`], twice that, … up to
/// [`Backoff::MAX`], which then repeats; [`Backoff::reset`] starts over.
///
/// The accept loop asks for a delay after each error of
/// [`ErrorClass::ResourceExhausted`](crate::ErrorClass::ResourceExhausted) or
/// [`ErrorClass::Unexpected`](crate::ErrorClass::Unexpected) and resets
/// after each accepted connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    /// The first delay of a run of errors: 10 ms.
    pub const FIRST: Duration = Duration::from_millis(10);
    /// The longest delay: 1 s.
    pub const MAX: Duration = Duration::from_secs(1);

    /// A back-off whose next delay is [`Backoff::FIRST`].
    #[must_use]
    pub fn new() -> Self {
        Backoff { next: Self::FIRST }
    }

    /// The delay to wait now; the one after it is twice as long, at most
    /// [`Backoff::MAX`].
    pub fn next_delay(&mut self) -> Duration {
        let now = self.next;
        self.next = (now * 2).min(Self::MAX);
        now
    }

    /// Starts over: the next delay is [`Backoff::FIRST`] again.
    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_from_10ms_and_stays_at_1s() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..10).map(|_| b.next_delay()).collect();
        assert_eq!(
            delays,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map(ms)
        );
    }

    #[test]
    fn reset_starts_over_at_10ms() {
        let mut b = Backoff::new();
        for _ in 0..20 {
            b.next_delay();
        }
        b.reset();
        assert_eq!(b.next_delay(), ms(10));
        assert_eq!(b.next_delay(), ms(20));
        assert_eq!(b, {
            let mut fresh = Backoff::default();
            fresh.next_delay();
            fresh.next_delay();
            fresh
        });
    }

    #[test]
    fn every_delay_is_within_the_bounds() {
        let mut b = Backoff::new();
        assert!(
            (0..1000)
                .map(|_| b.next_delay())
                .all(|d| (Backoff::FIRST..=Backoff::MAX).contains(&d))
        );
    }
}
