//! The canonical digest of a partition: a multiset hash over its rows, and the canonical
//! number form of a measure.
//!
//! Pure: readers (`src/readers/`) turn file content into rows (key texts and a scaled
//! integer measure); this module encodes each row canonically, hashes it and adds the hash
//! into a 256-bit sum. Nothing here knows about files or formats.

use sha2::block_api::compress256;
#[cfg(test)]
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::grain::Grain;

/// Tag byte of a key column in the canonical row encoding.
const TAG_KEY: u8 = 0x01;
/// Tag byte of the measure column in the canonical row encoding.
const TAG_MEASURE: u8 = 0x02;

/// The SHA-256 block size: the header is padded to a multiple of it.
const BLOCK_BYTES: usize = 64;
/// SHA-256's initial hash value (FIPS 180-4, 5.3.3). The rows' hashes are computed with the
/// `sha2` crate's compression function from the state after the header (a whole number of
/// blocks), with the standard padding; a unit test checks them against `Sha256::digest` of the
/// whole encoding.
const SHA256_INITIAL: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The canonical digest of a partition's rows, computed in one pass with constant memory.
///
/// The digest is a function of the rows as a multiset: independent of row order, of how rows
/// are split across files, and of the file format (CSV and Parquet holding the same rows
/// give the same digest). Other tools can compute it from this description.
///
/// **Canonical row encoding.** A row's encoding is a *header*, the same for every row of the
/// grain, followed by the row's *values*. The grain's columns (its keys and its measure) are
/// taken in ascending byte order of their names.
/// - Header: the number of columns as `u32` big-endian; then for each column in that order the
///   name's length as `u32` BE, the name's UTF-8 bytes and a tag byte, `0x01` for a key or
///   `0x02` for the measure, the measure's tag followed by the declared scale as `u32` BE; then
///   zero bytes up to the next multiple of 64 bytes (one SHA-256 block, so an implementation
///   can hash the header once and continue from that state for every row).
/// - Values, in the same column order: for a key the text's length as `u32` BE and the text's
///   UTF-8 bytes; for the measure the value as `i64` BE (two's complement) in `10^-scale` units.
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
/// **Digest.** Each row's SHA-256 over its encoding (header and values) is read as a 256-bit
/// big-endian unsigned integer; the hashes of all rows are added modulo 2^256. The digest text
/// is `ms256:<rows>:<the sum as 64 lowercase hex digits>`. A duplicated row adds its hash
/// twice, so multiplicity counts. Rejected rows are not part of it.
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
    /// The grain's keys in name order, as indices into `Grain::keys`.
    key_order: Vec<usize>,
    /// How many keys' names sort before the measure's: where the measure goes in the values.
    keys_before_measure: usize,
    /// The SHA-256 state after the header (a whole number of blocks): each row continues from
    /// it.
    after_header: [u32; 8],
    /// The header's length in bytes (a multiple of 64), for the padding's length field.
    header_bytes: u64,
    rows: u64,
    /// The sum modulo 2^256 as four 64-bit limbs, least significant first.
    sum: [u64; 4],
    /// A row's values and padding when they take more than one block (reused).
    buffer: Vec<u8>,
    /// The keys of a row given as texts, encoded (reused).
    encoded: Vec<u8>,
}

/// The canonical header of a grain (see [`RowDigest`]), padded to whole SHA-256 blocks.
fn header(grain: &Grain) -> Vec<u8> {
    let mut columns: Vec<(&str, Option<u32>)> = grain.keys.iter().map(|k| (k.as_str(), None)).collect();
    columns.push((grain.measure.as_str(), Some(grain.measure_scale)));
    columns.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = Vec::with_capacity(BLOCK_BYTES);
    push_len(&mut out, columns.len());
    for (name, scale) in columns {
        push_len(&mut out, name.len());
        out.extend_from_slice(name.as_bytes());
        match scale {
            None => out.push(TAG_KEY),
            Some(scale) => {
                out.push(TAG_MEASURE);
                out.extend_from_slice(&scale.to_be_bytes());
            }
        }
    }
    out.resize(out.len().div_ceil(BLOCK_BYTES) * BLOCK_BYTES, 0);
    out
}

impl RowDigest {
    /// An empty digest (no rows) for the grain's columns.
    pub fn new(grain: &Grain) -> RowDigest {
        let key_order = key_order(grain);
        let measure = grain.measure.as_bytes();
        let keys_before_measure = grain.keys.iter().filter(|k| k.as_bytes() < measure).count();
        let header = header(grain);
        let mut after_header = SHA256_INITIAL;
        compress256(&mut after_header, header.as_chunks::<BLOCK_BYTES>().0);
        RowDigest {
            header_bytes: header.len() as u64,
            key_order,
            keys_before_measure,
            after_header,
            rows: 0,
            sum: [0; 4],
            buffer: Vec::with_capacity(2 * BLOCK_BYTES),
            encoded: Vec::with_capacity(64),
        }
    }

    /// Adds one row: its key texts in the grain's key order, and its measure in
    /// `10^-scale` units.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `keys` does not hold one text per grain key.
    pub fn add_row(&mut self, keys: &[&str], measure: i64) -> Result<()> {
        if keys.len() != self.key_order.len() {
            return Err(Error::invalid(
                "row",
                &keys.join(","),
                format!("has {} key texts, the grain has {} keys", keys.len(), self.key_order.len()),
            ));
        }
        let mut encoded = std::mem::take(&mut self.encoded);
        encoded.clear();
        for &i in &self.key_order {
            encode_key(&mut encoded, keys[i].as_bytes());
        }
        let outcome = self.add_keyed(&encoded, measure);
        self.encoded = encoded;
        outcome
    }

    /// The grain's keys in the canonical (name) order, as indices into `Grain::keys`: the
    /// order in which [`RowDigest::add_keyed`] takes them.
    pub(crate) fn key_order(&self) -> &[usize] {
        &self.key_order
    }

    /// Adds one row whose keys are already encoded canonically: each key as [`encode_key`]
    /// does (`u32` BE length, UTF-8 bytes), in [`RowDigest::key_order`]. This is the row's
    /// canonical values without the measure, the form the readers build once per row for the
    /// key set too. The key bytes must be UTF-8 (the readers check it).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `keys` does not hold exactly one key per grain key.
    pub(crate) fn add_keyed(&mut self, keys: &[u8], measure: i64) -> Result<()> {
        // Where the measure goes: after the keys whose names sort before its name.
        let (mut at, mut count, mut split) = (0usize, 0usize, 0usize);
        while at < keys.len() {
            if count == self.keys_before_measure {
                split = at;
            }
            let Some(len) = keys.get(at..at + 4) else { break };
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            at = at.saturating_add(4 + len);
            count += 1;
        }
        if count == self.keys_before_measure {
            split = at;
        }
        if count != self.key_order.len() || at != keys.len() {
            return Err(Error::invalid("row", "(encoded keys)", format!("does not hold exactly {} keys", self.key_order.len())));
        }
        let values = keys.len() + 8;
        // SHA-256's padding: 0x80, zeros, the message's length in bits as u64 BE, to a whole
        // number of blocks.
        let bits = ((self.header_bytes + values as u64) * 8).to_be_bytes();
        let mut state = self.after_header;
        if values + 9 <= BLOCK_BYTES {
            // The common case: values and padding in one block, built on the stack.
            let mut block = [0u8; BLOCK_BYTES];
            block[..split].copy_from_slice(&keys[..split]);
            block[split..split + 8].copy_from_slice(&measure.to_be_bytes());
            block[split + 8..values].copy_from_slice(&keys[split..]);
            block[values] = 0x80;
            block[BLOCK_BYTES - 8..].copy_from_slice(&bits);
            compress256(&mut state, std::slice::from_ref(&block));
        } else {
            self.buffer.clear();
            self.buffer.extend_from_slice(&keys[..split]);
            self.buffer.extend_from_slice(&measure.to_be_bytes());
            self.buffer.extend_from_slice(&keys[split..]);
            self.buffer.push(0x80);
            let padded = (values + 9).div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
            self.buffer.resize(padded - 8, 0);
            self.buffer.extend_from_slice(&bits);
            compress256(&mut state, self.buffer.as_chunks::<BLOCK_BYTES>().0);
        }
        // The hash read as a 256-bit big-endian integer: word 0 is the most significant.
        self.add_limbs([
            u64::from(state[6]) << 32 | u64::from(state[7]),
            u64::from(state[4]) << 32 | u64::from(state[5]),
            u64::from(state[2]) << 32 | u64::from(state[3]),
            u64::from(state[0]) << 32 | u64::from(state[1]),
        ]);
        self.rows += 1;
        Ok(())
    }

    /// Adds another digest's rows (of the same grain): the digest of the union of two
    /// multisets, so per-file digests combine into the partition's.
    pub fn merge(&mut self, other: &RowDigest) {
        self.add_limbs(other.sum);
        self.rows += other.rows;
    }

    /// Adds a 256-bit value given as limbs, least significant first, modulo 2^256.
    fn add_limbs(&mut self, limbs: [u64; 4]) {
        let mut carry = 0u64;
        for (limb, add) in self.sum.iter_mut().zip(limbs) {
            let (s1, c1) = limb.overflowing_add(add);
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

/// Appends one key's canonical value (`u32` BE length, bytes): the readers encode a row's
/// keys with it, in [`RowDigest::key_order`], for the key set and [`RowDigest::add_keyed`].
pub(crate) fn encode_key(out: &mut Vec<u8>, key: &[u8]) {
    push_len(out, key.len());
    out.extend_from_slice(key);
}

/// The grain's keys in ascending byte order of their names, as indices into `Grain::keys`.
pub(crate) fn key_order(grain: &Grain) -> Vec<usize> {
    let mut order: Vec<usize> = (0..grain.keys.len()).collect();
    order.sort_by(|&a, &b| grain.keys[a].as_bytes().cmp(grain.keys[b].as_bytes()));
    order
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
#[cfg_attr(not(feature = "parquet"), allow(dead_code, reason = "used by the parquet reader only"))]
pub(crate) fn scale_integer(value: i128, scale: u32) -> Option<i64> {
    let factor = 10i128.checked_pow(scale)?;
    i64::try_from(value.checked_mul(factor)?).ok()
}

/// Rescales a decimal `unscaled * 10^-from` to `10^-to` units exactly, or `None` if digits
/// would be lost or the value does not fit an `i64`.
#[cfg_attr(not(feature = "parquet"), allow(dead_code, reason = "used by the parquet reader only"))]
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
        let mut header = 3u32.to_be_bytes().to_vec();
        for (name, tag) in [("item", TAG_KEY), ("store", TAG_KEY), ("units", TAG_MEASURE)] {
            header.extend_from_slice(&(name.len() as u32).to_be_bytes());
            header.extend_from_slice(name.as_bytes());
            header.push(tag);
        }
        header.extend_from_slice(&0u32.to_be_bytes()); // the measure's scale
        assert_eq!(header.len(), 37);
        header.resize(64, 0);
        let mut values = Vec::new();
        values.extend_from_slice(&2u32.to_be_bytes());
        values.extend_from_slice(b"i9");
        values.extend_from_slice(&2u32.to_be_bytes());
        values.extend_from_slice(b"s1");
        values.extend_from_slice(&(-3i64).to_be_bytes());
        let hash: [u8; 32] = Sha256::digest([header, values].concat()).into();
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(d.finish(), format!("ms256:1:{hex}"));
    }

    #[test]
    fn values_longer_than_one_block_hash_as_the_whole_encoding() {
        // Values of 0 to 200 bytes: the padding crosses every block boundary once.
        for len in [0usize, 40, 41, 47, 48, 55, 56, 63, 64, 119, 120, 200] {
            let text = "k".repeat(len.max(1));
            let mut d = RowDigest::new(&grain());
            d.add_row(&[&text, "i"], 7).unwrap();
            let mut encoding = header(&grain());
            for key in ["i", text.as_str()] {
                encoding.extend_from_slice(&(key.len() as u32).to_be_bytes());
                encoding.extend_from_slice(key.as_bytes());
            }
            encoding.extend_from_slice(&7i64.to_be_bytes());
            let hash: [u8; 32] = Sha256::digest(&encoding).into();
            let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(d.finish(), format!("ms256:1:{hex}"), "key of {len} bytes");
        }
    }

    #[test]
    fn digest_values_are_those_of_format_3() {
        // Literals computed outside this crate (Python's hashlib over the documented encoding),
        // and equal to what format 3 released: stored digests must keep matching.
        let mut d = RowDigest::new(&grain());
        d.add_row(&["1", "7"], 3).unwrap();
        d.add_row(&["2", "7"], 5).unwrap();
        d.add_row(&["-7", "apple"], -12).unwrap();
        assert_eq!(d.finish(), "ms256:3:55828a3f6673a2cddbaca459346ca644ac8fb737356104a7349f88fc9418e695");
        // The measure's name sorts first here, and the scale is 2.
        let mut invoices = Grain::new(DataFormat::Csv, &["invoice_id", "line"], "amount_cents");
        invoices.measure_scale = 2;
        let mut d = RowDigest::new(&invoices);
        d.add_row(&["inv-1", "1"], 1250).unwrap();
        d.add_row(&["inv-1", "2"], 99).unwrap();
        d.add_row(&["inv-2", "1"], -5).unwrap();
        assert_eq!(d.finish(), "ms256:3:8f5cb32ee117a72711de2925686e2a7d5deff6cf66434fedd6d8f1ac86044f6b");
        // Values longer than one block.
        let mut d = RowDigest::new(&grain());
        d.add_row(&["s", &"k".repeat(80)], 7).unwrap();
        assert_eq!(d.finish(), "ms256:1:52ddc7ac98649e4322c9667148290d816378536c7e21829b678aaa5c6f1a9f40");
    }

    #[test]
    fn the_measure_goes_where_its_name_sorts_among_the_keys() {
        // Measure first ("a"), between the keys ("c"), and last ("z"); keys given out of
        // name order, of one block and of two.
        for measure in ["a", "c", "z"] {
            for long in [false, true] {
                let grain = Grain::new(DataFormat::Csv, &["d", "b"], measure);
                let d_text = if long { "x".repeat(70) } else { "dd".to_owned() };
                let mut digest = RowDigest::new(&grain);
                digest.add_row(&[&d_text, "b1"], 9).unwrap();
                let mut values: Vec<(&str, Vec<u8>)> = vec![("d", d_text.clone().into_bytes()), ("b", b"b1".to_vec())];
                values.sort();
                let mut encoding = header(&grain);
                let mut measure_written = false;
                for (name, text) in values {
                    if !measure_written && measure < name {
                        encoding.extend_from_slice(&9i64.to_be_bytes());
                        measure_written = true;
                    }
                    encoding.extend_from_slice(&(text.len() as u32).to_be_bytes());
                    encoding.extend_from_slice(&text);
                }
                if !measure_written {
                    encoding.extend_from_slice(&9i64.to_be_bytes());
                }
                let hash: [u8; 32] = Sha256::digest(&encoding).into();
                let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(digest.finish(), format!("ms256:1:{hex}"), "measure {measure:?}, long {long}");
            }
        }
    }

    #[test]
    fn a_long_header_pads_to_whole_blocks_and_the_scale_counts() {
        let long: Vec<String> = (0..9).map(|i| format!("key_column_{i}")).collect();
        let names: Vec<&str> = long.iter().map(String::as_str).collect();
        let grain = Grain::new(DataFormat::Csv, &names, "amount_cents");
        assert_eq!(header(&grain).len() % BLOCK_BYTES, 0);
        assert!(header(&grain).len() > BLOCK_BYTES);
        let mut scaled = grain.clone();
        scaled.measure_scale = 2;
        let (mut a, mut b) = (RowDigest::new(&grain), RowDigest::new(&scaled));
        let row: Vec<&str> = names.iter().map(|_| "x").collect();
        a.add_row(&row, 5).unwrap();
        b.add_row(&row, 5).unwrap();
        assert_ne!(a.finish(), b.finish(), "the same integer at another scale is another value");
    }

    #[test]
    fn encoded_keys_and_texts_give_the_same_digest_and_bad_encodings_are_refused() {
        let (mut a, mut b) = (RowDigest::new(&grain()), RowDigest::new(&grain()));
        a.add_row(&["s1", "i9"], 4).unwrap();
        // Canonical order: item before store.
        assert_eq!(b.key_order(), [1, 0]);
        let mut encoded = Vec::new();
        encode_key(&mut encoded, b"i9");
        encode_key(&mut encoded, b"s1");
        b.add_keyed(&encoded, 4).unwrap();
        assert_eq!(a.finish(), b.finish());
        assert!(b.add_keyed(&encoded[..encoded.len() - 1], 4).is_err());
        encode_key(&mut encoded, b"extra");
        assert!(b.add_keyed(&encoded, 4).is_err());
        assert!(b.add_keyed(&[], 4).is_err());
        assert!(a.add_row(&["only one"], 4).is_err());
        assert_eq!(b.rows(), 1);
    }

    #[test]
    fn sum_wraps_modulo_2_pow_256_with_carries() {
        let mut d = RowDigest::new(&grain());
        d.add_limbs([u64::MAX; 4]);
        d.add_limbs([1, 0, 0, 0]);
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
