//! The canonical digest of a partition: a multiset hash over its rows, and the canonical
//! number form of a measure.
//!
//! Pure: readers (`src/readers/`) turn file content into rows (key texts and a scaled
//! integer measure); this module encodes each row canonically, hashes it and adds the hash
//! into a 256-bit sum. Nothing here knows about files or formats.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::grain::Grain;

/// Tag byte of a key column in the canonical row encoding.
const TAG_KEY: u8 = 0x01;
/// Tag byte of the measure column in the canonical row encoding.
const TAG_MEASURE: u8 = 0x02;

/// Where each column of the grain goes in the canonical (name-ordered) encoding.
#[derive(Debug, Clone)]
enum Slot {
    /// The key at this index of `Grain::keys`.
    Key(usize),
    Measure,
}

/// The canonical digest of a partition's rows, computed in one pass with constant memory.
///
/// The digest is a function of the rows as a multiset: independent of row order, of how rows
/// are split across files, and of the file format (CSV and Parquet holding the same rows
/// give the same digest). Other tools can compute it from this description.
///
/// **Canonical row encoding.** The grain's columns (its keys and its measure) are taken in
/// ascending byte order of their names. For each column, in that order: the name's length as
/// `u32` big-endian and the name's UTF-8 bytes, then
/// - for a key: tag byte `0x01`, the text's length as `u32` BE, the text's UTF-8 bytes;
/// - for the measure: tag byte `0x02`, the declared scale as `u32` BE, the value as `i64` BE
///   (two's complement) in `10^-scale` units.
///
/// **Text normalisation.** None: key text is taken byte for byte (no trimming, no case
/// folding, no Unicode normalisation) and must be valid UTF-8; an empty CSV field or a Parquet
/// null is a missing key (the row is rejected). A Parquet integer key becomes its shortest
/// decimal text (`-7`, `42`: a sign only when negative, no leading zeros), which is what a
/// CSV writer prints for the same value.
///
/// **Numbers.** See [`parse_measure`] for CSV text. A Parquet integer measure is multiplied
/// by `10^scale`; a `DECIMAL(p, s)` is rescaled exactly to the declared scale. Floating-point
/// columns are refused.
///
/// **Digest.** Each row's SHA-256 over its encoding is read as a 256-bit big-endian unsigned
/// integer; the hashes of all rows are added modulo 2^256. The digest text is
/// `ms256:<rows>:<the sum as 64 lowercase hex digits>`. A duplicated row adds its hash twice,
/// so multiplicity counts. Rejected rows are not part of it.
///
/// ```
/// use manifestdb::{DataFormat, Grain, RowDigest};
/// let grain = Grain::new(DataFormat::Csv, &["store", "item"], "units");
/// let (mut a, mut b) = (RowDigest::new(&grain), RowDigest::new(&grain));
/// a.add_row(&["1", "7"], 3)?;
/// a.add_row(&["2", "7"], 5)?;
/// b.add_row(&["2", "7"], 5)?;
/// b.add_row(&["1", "7"], 3)?;
/// assert_eq!(a.finish(), b.finish());
/// assert!(a.finish().starts_with("ms256:2:"));
/// # Ok::<(), manifestdb::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RowDigest {
    /// The grain's columns in name order: (name, slot).
    columns: Vec<(String, Slot)>,
    scale: u32,
    key_count: usize,
    rows: u64,
    /// The sum modulo 2^256 as four 64-bit limbs, least significant first.
    sum: [u64; 4],
    buffer: Vec<u8>,
}

impl RowDigest {
    /// An empty digest (no rows) for the grain's columns.
    pub fn new(grain: &Grain) -> RowDigest {
        let mut columns: Vec<(String, Slot)> = grain.keys.iter().enumerate().map(|(i, k)| (k.clone(), Slot::Key(i))).collect();
        columns.push((grain.measure.clone(), Slot::Measure));
        columns.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        RowDigest {
            columns,
            scale: grain.measure_scale,
            key_count: grain.keys.len(),
            rows: 0,
            sum: [0; 4],
            buffer: Vec::with_capacity(128),
        }
    }

    /// Adds one row: its key texts in the grain's key order, and its measure in
    /// `10^-scale` units.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `keys` does not hold one text per grain key.
    pub fn add_row(&mut self, keys: &[&str], measure: i64) -> Result<()> {
        if keys.len() != self.key_count {
            return Err(Error::invalid(
                "row",
                &keys.join(","),
                format!("has {} key texts, the grain has {} keys", keys.len(), self.key_count),
            ));
        }
        self.buffer.clear();
        for (name, slot) in &self.columns {
            push_len(&mut self.buffer, name.len());
            self.buffer.extend_from_slice(name.as_bytes());
            match slot {
                Slot::Key(i) => {
                    self.buffer.push(TAG_KEY);
                    push_len(&mut self.buffer, keys[*i].len());
                    self.buffer.extend_from_slice(keys[*i].as_bytes());
                }
                Slot::Measure => {
                    self.buffer.push(TAG_MEASURE);
                    self.buffer.extend_from_slice(&self.scale.to_be_bytes());
                    self.buffer.extend_from_slice(&measure.to_be_bytes());
                }
            }
        }
        let hash: [u8; 32] = Sha256::digest(&self.buffer).into();
        self.add_hash(&hash);
        self.rows += 1;
        Ok(())
    }

    /// Adds another digest's rows (of the same grain): the digest of the union of two
    /// multisets, so per-file digests combine into the partition's.
    pub fn merge(&mut self, other: &RowDigest) {
        let mut carry = 0u64;
        for (limb, add) in self.sum.iter_mut().zip(other.sum) {
            let (s1, c1) = limb.overflowing_add(add);
            let (s2, c2) = s1.overflowing_add(carry);
            *limb = s2;
            carry = u64::from(c1) + u64::from(c2);
        }
        self.rows += other.rows;
    }

    fn add_hash(&mut self, hash: &[u8; 32]) {
        let mut carry = 0u64;
        for (i, limb) in self.sum.iter_mut().enumerate() {
            // Limb i (least significant first) is bytes [24 - 8i, 32 - 8i) of the big-endian hash.
            let start = 24 - 8 * i;
            let mut word = [0u8; 8];
            word.copy_from_slice(&hash[start..start + 8]);
            let (s1, c1) = limb.overflowing_add(u64::from_be_bytes(word));
            let (s2, c2) = s1.overflowing_add(carry);
            *limb = s2;
            carry = u64::from(c1) + u64::from(c2);
        }
    }

    /// Rows added so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The digest text: `ms256:<rows>:<64 hex digits>`.
    pub fn finish(&self) -> String {
        let mut out = format!("ms256:{}:", self.rows);
        for limb in self.sum.iter().rev() {
            out.push_str(&format!("{limb:016x}"));
        }
        out
    }
}

fn push_len(buffer: &mut Vec<u8>, len: usize) {
    // Key texts are bounded by the readers' record-size limit and names by the grain check,
    // both far below 4 GiB.
    buffer.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

/// Parses a measure's text (CSV) into an integer number of `10^-scale` units.
///
/// Accepted: an optional `+` or `-`, one or more ASCII digits, optionally `.` and one or
/// more digits. No spaces, exponents or thousands separators. Fractional digits beyond
/// `scale` must be zeros (`12.50` at scale 1 is 125; `12.55` at scale 1 is refused).
///
/// # Errors
/// A message saying what is wrong with the text, or that the value does not fit an `i64`.
pub fn parse_measure(text: &str, scale: u32) -> Result<i64, String> {
    let bytes = text.as_bytes();
    let (negative, digits) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let (int_part, frac_part) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], Some(&digits[dot + 1..])),
        None => (digits, None),
    };
    let all_digits = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    if !all_digits(int_part) || frac_part.is_some_and(|f| !all_digits(f)) {
        return Err(format!("{:?} is not a number (expected [+-]digits[.digits])", shorten(text)));
    }
    let frac = frac_part.unwrap_or(&[]);
    let scale_usize = usize::try_from(scale).unwrap_or(usize::MAX);
    if frac.len() > scale_usize && frac[scale_usize..].iter().any(|&b| b != b'0') {
        return Err(format!("{:?} has more than {scale} decimal places", shorten(text)));
    }
    let overflow = || format!("{:?} does not fit a 64-bit integer at scale {scale}", shorten(text));
    let mut value: i128 = 0;
    for &d in int_part {
        value = value.checked_mul(10).and_then(|v| v.checked_add(i128::from(d - b'0'))).ok_or_else(overflow)?;
        if value > i128::from(u64::MAX) {
            return Err(overflow());
        }
    }
    for i in 0..scale_usize {
        let d = frac.get(i).map_or(0, |&b| i128::from(b - b'0'));
        value = value.checked_mul(10).and_then(|v| v.checked_add(d)).ok_or_else(overflow)?;
        if value > i128::from(u64::MAX) {
            return Err(overflow());
        }
    }
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| overflow())
}

/// Scales an integer by `10^scale`, or `None` on overflow.
pub(crate) fn scale_integer(value: i128, scale: u32) -> Option<i64> {
    let factor = 10i128.checked_pow(scale)?;
    i64::try_from(value.checked_mul(factor)?).ok()
}

/// Rescales a decimal `unscaled * 10^-from` to `10^-to` units exactly, or `None` if digits
/// would be lost or the value does not fit an `i64`.
pub(crate) fn rescale_decimal(unscaled: i128, from: i8, to: u32) -> Option<i64> {
    let to = i64::from(to);
    let from = i64::from(from);
    if to >= from {
        let factor = 10i128.checked_pow(u32::try_from(to - from).ok()?)?;
        i64::try_from(unscaled.checked_mul(factor)?).ok()
    } else {
        let factor = 10i128.checked_pow(u32::try_from(from - to).ok()?)?;
        if unscaled % factor != 0 {
            return None;
        }
        i64::try_from(unscaled / factor).ok()
    }
}

fn shorten(text: &str) -> &str {
    match text.char_indices().nth(40) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grain::DataFormat;

    fn grain() -> Grain {
        Grain::new(DataFormat::Csv, &["store", "item"], "units")
    }

    #[test]
    fn encoding_follows_the_documented_layout() {
        // One row, checked against an encoding built by hand from the documentation.
        let mut d = RowDigest::new(&grain());
        d.add_row(&["s1", "i9"], -3).unwrap();
        let mut expected = Vec::new();
        for (name, tag, payload) in [
            ("item", TAG_KEY, [2u32.to_be_bytes().to_vec(), b"i9".to_vec()].concat()),
            ("store", TAG_KEY, [2u32.to_be_bytes().to_vec(), b"s1".to_vec()].concat()),
            ("units", TAG_MEASURE, [0u32.to_be_bytes().to_vec(), (-3i64).to_be_bytes().to_vec()].concat()),
        ] {
            expected.extend_from_slice(&(name.len() as u32).to_be_bytes());
            expected.extend_from_slice(name.as_bytes());
            expected.push(tag);
            expected.extend_from_slice(&payload);
        }
        let hash: [u8; 32] = Sha256::digest(&expected).into();
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(d.finish(), format!("ms256:1:{hex}"));
    }

    #[test]
    fn sum_wraps_modulo_2_pow_256_with_carries() {
        let mut d = RowDigest::new(&grain());
        d.add_hash(&[0xff; 32]);
        d.add_hash(&{
            let mut one = [0u8; 32];
            one[31] = 1;
            one
        });
        assert_eq!(d.sum, [0; 4]);
    }

    #[test]
    fn merge_equals_adding_the_rows_in_one_digest() {
        let (mut all, mut a, mut b) = (RowDigest::new(&grain()), RowDigest::new(&grain()), RowDigest::new(&grain()));
        for i in 0..50i64 {
            let key = i.to_string();
            all.add_row(&[&key, "x"], i).unwrap();
            if i % 3 == 0 { a.add_row(&[&key, "x"], i).unwrap() } else { b.add_row(&[&key, "x"], i).unwrap() }
        }
        a.merge(&b);
        assert_eq!(a.finish(), all.finish());
    }

    #[test]
    fn measures_parse_at_their_scale() {
        assert_eq!(parse_measure("12", 0), Ok(12));
        assert_eq!(parse_measure("-12.5", 2), Ok(-1250));
        assert_eq!(parse_measure("+0.10", 1), Ok(1));
        assert_eq!(parse_measure("9223372036854775807", 0), Ok(i64::MAX));
        assert_eq!(parse_measure("-9223372036854775808", 0), Ok(i64::MIN));
        for bad in ["", "-", "1.", ".5", "1e3", " 1", "1,000", "12.55x", "9223372036854775808", "99999999999999999999999999999"] {
            assert!(parse_measure(bad, 0).is_err(), "{bad:?} must be refused");
        }
        assert!(parse_measure("12.55", 1).is_err());
    }

    #[test]
    fn decimals_rescale_exactly_or_not_at_all() {
        assert_eq!(rescale_decimal(1250, 2, 2), Some(1250));
        assert_eq!(rescale_decimal(125, 1, 2), Some(1250));
        assert_eq!(rescale_decimal(1250, 3, 2), Some(125));
        assert_eq!(rescale_decimal(1255, 3, 2), None);
        assert_eq!(scale_integer(7, 2), Some(700));
        assert_eq!(scale_integer(i128::from(i64::MAX), 1), None);
    }
}
