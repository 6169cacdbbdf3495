//! The bounds of an hdrhistogram V2 (or V2-deflate) encoding, checked before hdrhistogram's
//! deserializer allocates what its header declares.
//!
//! The deserializer trusts the header: it allocates the counts array its lowest, highest
//! and significant figures imply, then a buffer of the declared payload length, before it
//! reads a byte of the payload. A 40-byte header that declares 4 GiB costs 4 GiB. Here the
//! header is read first and refused unless:
//!
//! - the counts array it implies holds at most [`MAX_COUNTS`] counts (a recorder's
//!   histograms hold 23,552; one of five significant figures up to an hour, 2.4 million);
//! - its payload fits the counts (at most [`MAX_VARINT`] bytes a count: a V2 payload is one
//!   zigzag varint per count or per run of zeros);
//! - the payload it declares is in the input (for V2-deflate: the compressed length in the
//!   input, and the inflated payload as long as declared, inflated no further).
//!
//! So what is allocated is bounded by what the input holds, and by 8 bytes a count.

use std::io::Read as _;

/// The V2 format's cookies (hdrhistogram's `V2_COOKIE`, `V2_COMPRESSED_COOKIE`: a base
/// cookie with the word size, 0x10, in it).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;

/// The V2 header: cookie, payload length, normalizing offset, significant figures (u32
/// each), lowest and highest value (u64 each), the integer-to-double ratio (f64).
pub const HEADER: usize = 40;

/// The most counts a histogram read may have: 16 MiB of u64 counts.
pub const MAX_COUNTS: u64 = 1 << 21;

/// The longest zigzag varint of the V2 payload (a u64 in LEB128 form, 9 bytes as the
/// format writes its last byte whole).
pub const MAX_VARINT: u64 = 9;

/// Why an encoded histogram is refused before it is decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum V2Error {
    #[error("{present} bytes, shorter than the {HEADER}-byte V2 header")]
    NoHeader { present: usize },
    #[error("its cookie {0:#010x} is neither V2 nor V2-deflate")]
    Cookie(u32),
    #[error(
        "its header declares a payload of {declared} bytes and the field holds {present} after the header"
    )]
    PayloadBeyondInput { declared: u64, present: u64 },
    #[error(
        "its header declares a payload of {declared} bytes, more than its {counts} counts can take ({max} bytes)"
    )]
    PayloadBeyondCounts {
        declared: u64,
        counts: u64,
        max: u64,
    },
    #[error(
        "its bounds (lowest {low}, highest {high}, {digits} significant figures) are not a histogram's"
    )]
    Bounds { low: u64, high: u64, digits: u32 },
    #[error(
        "its bounds (lowest {low}, highest {high}, {digits} significant figures) imply {counts} counts, more than the {MAX_COUNTS} accepted"
    )]
    TooManyCounts {
        low: u64,
        high: u64,
        digits: u32,
        counts: u64,
    },
    #[error("its deflated V2 does not inflate: {0}")]
    Inflate(String),
}

/// The header's fields that bound an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    payload: u64,
    digits: u32,
    low: u64,
    high: u64,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

fn header(bytes: &[u8]) -> Result<Header, V2Error> {
    if bytes.len() < HEADER {
        return Err(V2Error::NoHeader {
            present: bytes.len(),
        });
    }
    Ok(Header {
        payload: u64::from(u32_at(bytes, 4)),
        digits: u32_at(bytes, 12),
        low: u64_at(bytes, 16),
        high: u64_at(bytes, 24),
    })
}

/// The length of the counts array of a histogram of these bounds, as
/// `Histogram::new_with_bounds` computes it; `None` when it would refuse them.
pub fn counts_len(low: u64, high: u64, digits: u32) -> Option<u64> {
    if low < 1 || digits > 5 || low > u64::MAX / 2 || high < low.saturating_mul(2) {
        return None;
    }
    let single_unit = 2 * 10u64.pow(digits);
    // ceil(log2(single_unit))
    let magnitude = u64::BITS - (single_unit - 1).leading_zeros();
    let half_magnitude = magnitude.max(1) - 1;
    let unit_magnitude = u64::BITS - 1 - low.leading_zeros();
    if unit_magnitude + half_magnitude > 61 {
        return None;
    }
    let sub_bucket_count = 1u64 << (half_magnitude + 1);
    let mut smallest_untrackable = sub_bucket_count << unit_magnitude;
    let mut buckets = 1u64;
    while smallest_untrackable <= high {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    Some((buckets + 1) * (sub_bucket_count / 2))
}

/// Checks a V2 header against the payload present after it (`present` bytes).
fn check_v2(h: Header, present: u64) -> Result<(), V2Error> {
    let counts = counts_len(h.low, h.high, h.digits).ok_or(V2Error::Bounds {
        low: h.low,
        high: h.high,
        digits: h.digits,
    })?;
    if counts > MAX_COUNTS {
        return Err(V2Error::TooManyCounts {
            low: h.low,
            high: h.high,
            digits: h.digits,
            counts,
        });
    }
    let max = counts * MAX_VARINT;
    if h.payload > max {
        return Err(V2Error::PayloadBeyondCounts {
            declared: h.payload,
            counts,
            max,
        });
    }
    if h.payload > present {
        return Err(V2Error::PayloadBeyondInput {
            declared: h.payload,
            present,
        });
    }
    Ok(())
}

/// An encoded histogram as plain V2 whose header has been checked: the input itself when it
/// is V2, the inflated V2 when it is V2-deflate. Hand the result to hdrhistogram's
/// deserializer: it allocates no more than the input holds.
pub fn bounded(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, V2Error> {
    if bytes.len() < 8 {
        return Err(V2Error::NoHeader {
            present: bytes.len(),
        });
    }
    match u32_at(bytes, 0) {
        V2_COOKIE => {
            let h = header(bytes)?;
            check_v2(h, (bytes.len() - HEADER) as u64)?;
            Ok(std::borrow::Cow::Borrowed(bytes))
        }
        V2_DEFLATE_COOKIE => {
            let declared = u64::from(u32_at(bytes, 4));
            let present = (bytes.len() - 8) as u64;
            if declared > present {
                return Err(V2Error::PayloadBeyondInput { declared, present });
            }
            // `declared <= present`, so it indexes the input.
            let compressed = &bytes[8..8 + usize::try_from(declared).unwrap_or(usize::MAX)];
            let mut inflater = flate2::read::ZlibDecoder::new(compressed);
            let mut inflated = vec![0u8; HEADER];
            inflater
                .read_exact(&mut inflated)
                .map_err(|e| V2Error::Inflate(e.to_string()))?;
            let cookie = u32_at(&inflated, 0);
            if cookie != V2_COOKIE {
                return Err(V2Error::Cookie(cookie));
            }
            let h = header(&inflated)?;
            // Checked against the most it may inflate to; then inflated no further than
            // declared, and what came out is what is present.
            check_v2(h, h.payload)?;
            inflater
                .take(h.payload)
                .read_to_end(&mut inflated)
                .map_err(|e| V2Error::Inflate(e.to_string()))?;
            check_v2(h, (inflated.len() - HEADER) as u64)?;
            Ok(std::borrow::Cow::Owned(inflated))
        }
        other => Err(V2Error::Cookie(other)),
    }
}

#[cfg(test)]
mod tests {
    use hdrhistogram::Histogram;
    use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer, V2Serializer};

    use super::{HEADER, MAX_COUNTS, V2Error, bounded, counts_len};

    fn sample() -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for v in [1, 7, 250, 9_000, 3_000_000] {
            h.record(v).expect("in range");
        }
        h
    }

    #[test]
    fn counts_len_is_hdrhistograms_own() {
        for low in [1, 2, 3, 1000, 1 << 20] {
            for high in [low * 2, 3_600_000_000, 1 << 40, u64::MAX] {
                for digits in 0..=5 {
                    let theirs = Histogram::<u64>::new_with_bounds(low, high, digits as u8)
                        .ok()
                        .map(|h| h.distinct_values() as u64);
                    // Only those small enough to build here.
                    if counts_len(low, high, digits).is_some_and(|n| n <= MAX_COUNTS) {
                        assert_eq!(
                            counts_len(low, high, digits),
                            theirs,
                            "{low} {high} {digits}"
                        );
                    }
                }
            }
        }
        assert_eq!(counts_len(0, 10, 3), None);
        assert_eq!(counts_len(5, 9, 3), None);
        assert_eq!(counts_len(1, 100, 6), None);
        assert_eq!(counts_len(1, 3_600_000_000, 3), Some(23_552));
    }

    #[test]
    fn honest_v2_and_v2_deflate_pass() {
        let mut plain = Vec::new();
        V2Serializer::new()
            .serialize(&sample(), &mut plain)
            .expect("v2");
        assert_eq!(bounded(&plain).map(|_| ()), Ok(()));
        let mut deflated = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&sample(), &mut deflated)
            .expect("v2 deflate");
        assert_eq!(bounded(&deflated).expect("inflates").as_ref(), &plain[..]);
    }

    #[test]
    fn a_declared_length_beyond_the_input_is_refused_before_it_is_allocated() {
        let mut plain = Vec::new();
        V2Serializer::new()
            .serialize(&sample(), &mut plain)
            .expect("v2");
        let present = (plain.len() - HEADER) as u64;
        plain[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            bounded(&plain),
            Err(V2Error::PayloadBeyondCounts { declared, .. }) if declared == u64::from(u32::MAX)
        ));
        plain[4..8].copy_from_slice(&(present as u32 + 1).to_be_bytes());
        assert_eq!(
            bounded(&plain),
            Err(V2Error::PayloadBeyondInput {
                declared: present + 1,
                present
            })
        );
        // Bounds whose counts array is huge.
        let mut wide = plain.clone();
        wide[12..16].copy_from_slice(&5u32.to_be_bytes());
        wide[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(bounded(&wide), Err(V2Error::TooManyCounts { .. })));
        // V2-deflate: its compressed length beyond the input, and an inflated payload
        // shorter than declared.
        let mut deflated = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&sample(), &mut deflated)
            .expect("v2 deflate");
        let mut long = deflated.clone();
        long[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            bounded(&long),
            Err(V2Error::PayloadBeyondInput { .. })
        ));
        let mut inner = Vec::new();
        V2Serializer::new()
            .serialize(&sample(), &mut inner)
            .expect("v2");
        inner[4..8].copy_from_slice(&(present as u32 + 100).to_be_bytes());
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, &inner).expect("deflate");
        let z = z.finish().expect("deflate");
        let mut lying = 0x1c84_9314u32.to_be_bytes().to_vec();
        lying.extend((z.len() as u32).to_be_bytes());
        lying.extend(z);
        assert_eq!(
            bounded(&lying),
            Err(V2Error::PayloadBeyondInput {
                declared: present + 100,
                present
            })
        );
        assert!(matches!(bounded(&[0u8; 3]), Err(V2Error::NoHeader { .. })));
        assert!(matches!(bounded(&[0u8; 50]), Err(V2Error::Cookie(0))));
    }
}
