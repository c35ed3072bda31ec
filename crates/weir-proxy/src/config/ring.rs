//! `hash_ring` and `[fleet] ring`: which consistent hash a ring uses (see
//! `crate::balance::ring`).

/// Which consistent hash a ring uses (`hash_ring`, `[fleet] ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RingHash {
    /// `"weir"`: 1,024 points per unit of weight, FNV-1a and murmur3.
    #[default]
    Weir,
    /// `"ketama"`: nginx's `hash … consistent`, 160 points per unit of
    /// weight, CRC-32; the same server for the same key as nginx.
    Ketama,
}

impl RingHash {
    /// The kind `text` names: `"weir"` or `"ketama"`.
    ///
    /// # Errors
    /// A message naming the two accepted values.
    pub fn parse(text: &str) -> Result<RingHash, String> {
        match text {
            "weir" => Ok(RingHash::Weir),
            "ketama" => Ok(RingHash::Ketama),
            other => Err(format!(
                "unknown ring {other:?}: use \"weir\" or \"ketama\" (nginx's `hash ... consistent`)"
            )),
        }
    }
}
