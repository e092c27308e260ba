//! Versioned deltas of policy snapshots: version N as a change against a base version a reader
//! already holds, so a broadcast moves what changed instead of the whole policy.
//!
//! Snapshots of one run share their layout (the same tensors, names and shapes, sorted by
//! name: [`crate::snapshot::encode`]), so a delta is the byte-wise XOR of the two snapshots,
//! zero wherever a byte did not change. It is cut into chunks of [`CHUNK_VALUES`] values, made
//! and applied in parallel. A chunk where nothing changed is a flag; in the others the bytes are
//! regrouped into planes by their place in a value (every value's lowest byte, then every
//! value's next byte, ...): a small update changes the low bytes of the mantissa and leaves
//! the sign and exponent alone, so whole planes are zero, and LZ4 ([`lz4_flex`], a pure-Rust
//! block codec) squeezes them to almost nothing.
//!
//! A delta names both versions by their checksums (XXH3-128): [`apply`] refuses a base that is
//! not the one the delta was made against and checks what it rebuilds, so a reconstructed
//! snapshot is the version's bytes bit for bit, or an error that says which check failed.

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_128;

/// The first bytes of every delta (format version 1).
const MAGIC: &[u8; 8] = b"CAPRLDT1";
/// Magic, value width, snapshot length, base and result checksums.
const HEADER_LEN: usize = 8 + 1 + 8 + 16 + 16;

/// Why a delta could not be made or applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeltaError {
    #[error("a delta needs snapshots of one layout: the base has {base} bytes, the new one {next} (did the model's shape change?)")]
    LayoutChanged { base: usize, next: usize },
    #[error("value width {0} is not 1, 2, 4 or 8 bytes")]
    BadWidth(usize),
    #[error("not a snapshot delta ({0}); fetch the full snapshot instead")]
    Malformed(String),
    #[error("the delta was made against another base snapshot than the one held (xxh3 {held:032x}, the delta's base {wanted:032x}); fetch the full snapshot instead")]
    OtherBase { held: u128, wanted: u128 },
    #[error("the rebuilt snapshot fails its checksum (xxh3 {got:032x}, the version's {wanted:032x}): the delta is damaged; fetch the full snapshot instead")]
    Damaged { got: u128, wanted: u128 },
}

/// Values per chunk: 1 MiB of f32.
pub const CHUNK_VALUES: usize = 1 << 18;

/// A chunk whose bytes did not change: nothing follows its flag.
const UNCHANGED: u8 = 0;
/// A chunk followed by its compressed length (u32) and its LZ4 block of byte planes.
const CHANGED: u8 = 1;

/// The delta that turns `base` into `next`, two snapshots of one layout whose values are
/// `width` bytes wide (4 for f32, 2 for bf16).
pub fn encode(base: &[u8], next: &[u8], width: usize) -> Result<Vec<u8>, DeltaError> {
    if base.len() != next.len() {
        return Err(DeltaError::LayoutChanged {
            base: base.len(),
            next: next.len(),
        });
    }
    if ![1, 2, 4, 8].contains(&width) {
        return Err(DeltaError::BadWidth(width));
    }
    let chunk = CHUNK_VALUES * width;
    let bodies: Vec<Option<Vec<u8>>> = base
        .par_chunks(chunk)
        .zip(next.par_chunks(chunk))
        .map(|(b, n)| (b != n).then(|| lz4_flex::compress(&xor_into_planes(b, n, width))))
        .collect();
    let mut out =
        Vec::with_capacity(HEADER_LEN + bodies.iter().flatten().map(Vec::len).sum::<usize>());
    out.extend_from_slice(MAGIC);
    out.push(width as u8);
    out.extend_from_slice(&(next.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_128(base).to_le_bytes());
    out.extend_from_slice(&xxh3_128(next).to_le_bytes());
    for body in &bodies {
        match body {
            None => out.push(UNCHANGED),
            Some(body) => {
                out.push(CHANGED);
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(body);
            }
        }
    }
    Ok(out)
}

/// The snapshot `delta` makes of `base`, checked: `base` must be the delta's base and the
/// result must have the new version's checksum.
pub fn apply(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, DeltaError> {
    let mut next = base.to_vec();
    apply_in_place(&mut next, None, delta)?;
    Ok(next)
}

/// [`apply`] to the held snapshot itself, which becomes the new version: no copy of a snapshot
/// is made. `held_xxh3` is the held bytes' XXH3-128 when the reader knows it (what the delta
/// that made them returned), else they are hashed; the new version's is returned. A base that
/// is not the delta's is refused untouched; after that, on an error (a damaged delta) the held
/// bytes are part-changed and the reader fetches the full snapshot.
pub fn apply_in_place(
    held: &mut [u8],
    held_xxh3: Option<u128>,
    delta: &[u8],
) -> Result<u128, DeltaError> {
    let header = Header::read(delta)?;
    if header.len != held.len() {
        return Err(DeltaError::LayoutChanged {
            base: held.len(),
            next: header.len,
        });
    }
    let was = held_xxh3.unwrap_or_else(|| xxh3_128(held));
    if was != header.base {
        return Err(DeltaError::OtherBase {
            held: was,
            wanted: header.base,
        });
    }
    let chunk = CHUNK_VALUES * header.width;
    let bodies = chunk_bodies(&delta[HEADER_LEN..], held.len().div_ceil(chunk))?;
    // Every thread decompresses into one buffer of its own.
    held.par_chunks_mut(chunk).zip(bodies).try_for_each_init(
        || vec![0u8; chunk],
        |buf, (n, body)| {
            let Some(body) = body else {
                return Ok(());
            };
            let planes = &mut buf[..n.len()];
            let len = lz4_flex::decompress_into(body, planes)
                .map_err(|e| DeltaError::Malformed(format!("a chunk does not decompress: {e}")))?;
            if len != n.len() {
                return Err(DeltaError::Malformed("a chunk has the wrong length".into()));
            }
            xor_from_planes(n, planes, header.width);
            Ok(())
        },
    )?;
    let got = xxh3_128(held);
    if got != header.next {
        return Err(DeltaError::Damaged {
            got,
            wanted: header.next,
        });
    }
    Ok(got)
}

/// The `chunks` chunks of a delta's body: `None` for an unchanged one, else its LZ4 block.
fn chunk_bodies(mut body: &[u8], chunks: usize) -> Result<Vec<Option<&[u8]>>, DeltaError> {
    let cut = |what: &str| DeltaError::Malformed(format!("its body is cut short ({what})"));
    let mut out = Vec::with_capacity(chunks);
    for _ in 0..chunks {
        let (&flag, rest) = body.split_first().ok_or_else(|| cut("a chunk flag"))?;
        body = rest;
        match flag {
            UNCHANGED => out.push(None),
            CHANGED => {
                let len = body.get(..4).ok_or_else(|| cut("a chunk length"))?;
                let len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
                let block = body.get(4..4 + len).ok_or_else(|| cut("a chunk"))?;
                out.push(Some(block));
                body = &body[4 + len..];
            }
            other => return Err(DeltaError::Malformed(format!("chunk flag {other}"))),
        }
    }
    if !body.is_empty() {
        return Err(DeltaError::Malformed(format!(
            "{} bytes after its last chunk",
            body.len()
        )));
    }
    Ok(out)
}

/// The XXH3-128 of the snapshot `delta` rebuilds, as its header names it.
pub fn result_xxh3(delta: &[u8]) -> Result<u128, DeltaError> {
    Ok(Header::read(delta)?.next)
}

/// What a delta's header says.
struct Header {
    width: usize,
    len: usize,
    base: u128,
    next: u128,
}

impl Header {
    fn read(delta: &[u8]) -> Result<Header, DeltaError> {
        if delta.len() < HEADER_LEN || &delta[..8] != MAGIC {
            return Err(DeltaError::Malformed(format!(
                "{} bytes without the delta header",
                delta.len()
            )));
        }
        let width = usize::from(delta[8]);
        if ![1, 2, 4, 8].contains(&width) {
            return Err(DeltaError::BadWidth(width));
        }
        let u64_at =
            |at: usize| u64::from_le_bytes(delta[at..at + 8].try_into().unwrap_or_default());
        let u128_at =
            |at: usize| u128::from_le_bytes(delta[at..at + 16].try_into().unwrap_or_default());
        Ok(Header {
            width,
            len: usize::try_from(u64_at(9)).unwrap_or(usize::MAX),
            base: u128_at(17),
            next: u128_at(33),
        })
    }
}

/// `base ^ next`, byte `p` of every `width`-byte value into plane `p` (a tail shorter than a
/// value stays at the end as it is).
fn xor_into_planes(base: &[u8], next: &[u8], width: usize) -> Vec<u8> {
    let mut planes = vec![0u8; base.len()];
    match width {
        1 => into_planes_of::<1>(base, next, &mut planes),
        2 => into_planes_of::<2>(base, next, &mut planes),
        4 => into_planes_of::<4>(base, next, &mut planes),
        _ => into_planes_of::<8>(base, next, &mut planes),
    }
    planes
}

/// [`xor_into_planes`] for values `W` bytes wide (a constant, so the loop vectorises).
fn into_planes_of<const W: usize>(base: &[u8], next: &[u8], planes: &mut [u8]) {
    let values = base.len() / W;
    let (body, tail) = planes.split_at_mut(values * W);
    let mut plane: Vec<&mut [u8]> = body.chunks_exact_mut(values.max(1)).collect();
    if values > 0 {
        for (i, (b, n)) in base.chunks_exact(W).zip(next.chunks_exact(W)).enumerate() {
            for p in 0..W {
                plane[p][i] = b[p] ^ n[p];
            }
        }
    }
    let start = values * W;
    for (o, (b, n)) in tail
        .iter_mut()
        .zip(base[start..].iter().zip(&next[start..]))
    {
        *o = b ^ n;
    }
}

/// The inverse of [`xor_into_planes`]: `next`, a copy of the base, with the planes'
/// differences applied in place.
fn xor_from_planes(next: &mut [u8], planes: &[u8], width: usize) {
    match width {
        1 => xor_planes_of::<1>(next, planes),
        2 => xor_planes_of::<2>(next, planes),
        4 => xor_planes_of::<4>(next, planes),
        _ => xor_planes_of::<8>(next, planes),
    }
}

/// [`xor_from_planes`] for values `W` bytes wide: the width a constant, so the loop over
/// values compiles to vector shuffles.
fn xor_planes_of<const W: usize>(next: &mut [u8], planes: &[u8]) {
    let values = next.len() / W;
    let plane: [&[u8]; W] = std::array::from_fn(|p| &planes[p * values..(p + 1) * values]);
    for (i, n) in next.chunks_exact_mut(W).enumerate() {
        for p in 0..W {
            n[p] ^= plane[p][i];
        }
    }
    let tail = values * W;
    for (n, d) in next[tail..].iter_mut().zip(&planes[tail..]) {
        *n ^= d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_delta_rebuilds_the_new_snapshot_bit_for_bit_at_every_width() {
        for width in [1, 2, 4, 8] {
            // 1,003 bytes: a tail shorter than a value at widths 2, 4 and 8.
            let base = bytes(1003, 1);
            let mut next = base.clone();
            for i in (0..next.len()).step_by(37) {
                next[i] ^= 0x5a;
            }
            let delta = encode(&base, &next, width).unwrap();
            assert_eq!(apply(&base, &delta).unwrap(), next, "width {width}");
            assert_eq!(result_xxh3(&delta).unwrap(), xxh3_128(&next));
            let same = encode(&base, &base, width).unwrap();
            assert!(
                same.len() < HEADER_LEN + 40,
                "an unchanged snapshot: {} bytes",
                same.len()
            );
        }
    }

    /// Over several chunks, with some unchanged, and a last chunk shorter than the others.
    #[test]
    fn chunks_that_did_not_change_are_flags_and_the_rest_rebuild_exactly() {
        let width = 2;
        let base = bytes(CHUNK_VALUES * width * 3 + 1001, 5);
        let mut next = base.clone();
        next[7] ^= 1; // first chunk
        let last = next.len() - 1;
        next[last] ^= 0x80; // the short last chunk; the two between are unchanged
        let delta = encode(&base, &next, width).unwrap();
        assert!(delta.len() < 4096, "{} bytes", delta.len());
        assert_eq!(apply(&base, &delta).unwrap(), next);
        // A body with a chunk missing or one too many is refused, not read past.
        assert!(matches!(
            apply(&base, &delta[..delta.len() - 1]),
            Err(DeltaError::Malformed(_))
        ));
        let mut longer = delta.clone();
        longer.push(UNCHANGED);
        assert!(matches!(
            apply(&base, &longer),
            Err(DeltaError::Malformed(_))
        ));
    }

    #[test]
    fn a_wrong_base_a_damaged_delta_or_another_layout_is_refused() {
        let base = bytes(4096, 2);
        let next = bytes(4096, 3);
        let delta = encode(&base, &next, 4).unwrap();
        let other = bytes(4096, 4);
        assert!(matches!(
            apply(&other, &delta),
            Err(DeltaError::OtherBase { .. })
        ));
        // In place: another base is refused untouched; one the reader wrongly claims is the
        // delta's base is caught by the result's checksum; the right one becomes the new
        // version, whose checksum is returned.
        let mut held = other.clone();
        let refused = apply_in_place(&mut held, None, &delta);
        assert!(matches!(refused, Err(DeltaError::OtherBase { .. })));
        assert_eq!(held, other);
        let claimed = apply_in_place(&mut held, Some(xxh3_128(&base)), &delta);
        assert!(
            matches!(claimed, Err(DeltaError::Damaged { .. })),
            "{claimed:?}"
        );
        let mut held = base.clone();
        let sum = apply_in_place(&mut held, None, &delta).unwrap();
        assert_eq!((held.as_slice(), sum), (next.as_slice(), xxh3_128(&next)));
        assert!(matches!(
            apply(&base[..4000], &delta),
            Err(DeltaError::LayoutChanged { .. })
        ));
        assert!(matches!(
            encode(&base, &next[..10], 4),
            Err(DeltaError::LayoutChanged { .. })
        ));
        assert!(matches!(
            apply(&base, &delta[..20]),
            Err(DeltaError::Malformed(_))
        ));
        let mut flipped = delta.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            apply(&base, &flipped),
            Err(DeltaError::Damaged { .. } | DeltaError::Malformed(_))
        ));
        let mut wrong_result = delta.clone();
        wrong_result[40] ^= 1;
        assert!(matches!(
            apply(&base, &wrong_result),
            Err(DeltaError::Damaged { .. })
        ));
        assert_eq!(encode(&base, &next, 3), Err(DeltaError::BadWidth(3)));
    }
}
