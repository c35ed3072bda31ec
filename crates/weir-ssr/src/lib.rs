//! Weir's SSR fragment composition.
//!
//! A *template* is an HTML page with include tags (`<fragment>`,
//! `<esi:include>`). [`scan`] finds them as the template streams, without
//! parsing the HTML around them.

pub mod scan;

pub use scan::{Include, Piece, ScanLimits, ScanWarning, Scanner, Syntax};
