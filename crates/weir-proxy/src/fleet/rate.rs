//! Fleet-wide rate limits (`[route.rate_limit] scope = "fleet"`): the
//! bucket of a limit key lives on the key's owner on the fleet's ring.
//! The replica a request reaches takes a token there: from its own
//! buckets when it owns the key, else by asking the owner in one small
//! request (`crate::exchange::rate`) that carries the peer token and
//! [`RATE_ASK`]. The owner answers `204` (a token taken) or `429` with
//! `Retry-After`, before routing and without an access log line.
//!
//! So the whole fleet admits a key's rate once, whichever replicas the
//! clients reach. When the owner cannot be asked (down, no answer within
//! `rate_timeout`, in back-off after such failures of rate-limit asks:
//! failed forwards do not count), the asking replica takes the token from
//! the route's own bucket: the limit holds per replica until the owner is
//! back. While replicas disagree about the members, a key may have two
//! owners for a moment.

use http::{HeaderMap, HeaderValue};

use super::{Fleet, Lane, Owner, RATE_ASK};
use crate::rate_limit::Rate;

impl Fleet {
    /// Who keeps the bucket `id`: this replica, or the peer to ask;
    /// `None` while rate-limit asks to that peer are in back-off (the
    /// route's own bucket decides meanwhile). Failed forwards do not
    /// count here (see [`Lane`]).
    pub(crate) fn rate_owner(&self, id: &[u8]) -> Option<Owner> {
        match self.ring_owner(id) {
            Owner::Peer { addr, .. }
                if self.members.load().is_down(addr, Lane::Rate, self.now_ms()) =>
            {
                None
            }
            owner => Some(owner),
        }
    }

    /// Takes a token from bucket `id` of `rate` among the buckets this
    /// replica owns: `Err(seconds)` to retry after.
    pub(crate) fn take_token(&self, rate: Rate, id: &[u8]) -> Result<(), u64> {
        self.buckets.check(rate, id)
    }

    /// A peer's ask ([`super::Admitted::RateAsk`]): `Some(Ok(()))` when a
    /// token was taken, `Some(Err(seconds))` when the bucket is empty,
    /// `None` when the field is malformed.
    pub(crate) fn answer_rate(&self, headers: &HeaderMap) -> Option<Result<(), u64>> {
        let (rate, id) = parse_ask(headers.get(RATE_ASK)?.as_bytes())?;
        self.count(crate::metrics::FleetResult::RateAnswered);
        Some(self.take_token(rate, &id))
    }
}

/// The [`RATE_ASK`] value for bucket `id` of `rate`.
pub(crate) fn ask_value(rate: Rate, id: &[u8]) -> Option<HeaderValue> {
    let mut text = format!("{} {} ", rate.per_second, rate.burst);
    for b in id {
        text.push_str(&format!("{b:02x}"));
    }
    HeaderValue::from_str(&text).ok()
}

/// The rate and id of a [`RATE_ASK`] value; `None` unless it is three
/// fields, the rate's two in 1..=1,000,000 and the id even-length hex.
fn parse_ask(value: &[u8]) -> Option<(Rate, Vec<u8>)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut fields = text.split(' ');
    let mut number = || {
        fields
            .next()?
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=1_000_000).contains(n))
    };
    let rate = Rate {
        per_second: number()?,
        burst: number()?,
    };
    let hex = fields.next()?;
    if fields.next().is_some() || hex.len() % 2 != 0 {
        return None;
    }
    let id = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some((rate, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_reads_back_as_written() {
        let rate = Rate {
            per_second: 100,
            burst: 5,
        };
        let v = ask_value(rate, b"/\0vk\xff").expect("a value");
        assert_eq!(v.to_str().expect("ascii"), "100 5 2f00766bff");
        assert_eq!(parse_ask(v.as_bytes()), Some((rate, b"/\0vk\xff".to_vec())));
        for bad in [
            "",
            "100 5",
            "0 5 00",
            "100 5 0",
            "100 5 zz",
            "100 5 00 1",
            "x 5 00",
        ] {
            assert_eq!(parse_ask(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
