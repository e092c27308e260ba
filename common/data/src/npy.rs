//! A small reader and writer for NumPy `.npy` (format versions 1–3) and `.npz` files holding
//! little-endian `f32` or `f64` arrays, the per-image feature layout of self-critical.pytorch
//! (`fc/<id>.npy`, `att/<id>.npz` with array `feat`).

use std::io::Read;
use std::path::Path;

use super::error::DataError;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Element type of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NpyDtype {
    F32,
    F64,
}

impl NpyDtype {
    fn size(self) -> usize {
        match self {
            NpyDtype::F32 => 4,
            NpyDtype::F64 => 8,
        }
    }
}

/// A parsed header: dtype, shape and where the data starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NpyHeader {
    pub dtype: NpyDtype,
    pub shape: Vec<usize>,
    pub data_offset: usize,
}

impl NpyHeader {
    pub(crate) fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Parse the header at the start of `bytes` (which may be only the first few hundred bytes).
pub(crate) fn parse_header(bytes: &[u8], path: &Path) -> Result<NpyHeader, DataError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(DataError::npy(
            path,
            "not a .npy file (missing \\x93NUMPY magic)",
        ));
    }
    let major = bytes[6];
    let (len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(DataError::npy(path, "truncated header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => {
            return Err(DataError::npy(
                path,
                format!("unsupported .npy version {v}; save with numpy's default format"),
            ))
        }
    };
    let end = start + len;
    let header = bytes
        .get(start..end)
        .ok_or_else(|| DataError::npy(path, "truncated header"))?;
    let header =
        std::str::from_utf8(header).map_err(|_| DataError::npy(path, "header is not text"))?;
    let descr = dict_value(header, "descr")
        .ok_or_else(|| DataError::npy(path, format!("header has no 'descr': {header}")))?;
    let descr = descr.trim().trim_matches(|c| c == '\'' || c == '"');
    let dtype = match descr {
        "<f4" | "=f4" | "|f4" => NpyDtype::F32,
        "<f8" | "=f8" | "|f8" => NpyDtype::F64,
        other => {
            return Err(DataError::npy(
                path,
                format!("dtype {other} not supported; save little-endian float32 or float64 (arr.astype('<f4'))"),
            ))
        }
    };
    let fortran = dict_value(header, "fortran_order")
        .map(|v| v.trim().starts_with("True"))
        .unwrap_or(false);
    let shape_text = dict_value(header, "shape")
        .ok_or_else(|| DataError::npy(path, format!("header has no 'shape': {header}")))?;
    let inner = shape_text
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| DataError::npy(path, format!("cannot read shape {shape_text}")))?;
    let mut shape = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n = part
            .trim_end_matches('L')
            .parse::<usize>()
            .map_err(|_| DataError::npy(path, format!("cannot read shape {shape_text}")))?;
        shape.push(n);
    }
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(DataError::npy(
            path,
            "Fortran-ordered arrays are not supported; save np.ascontiguousarray(arr)",
        ));
    }
    Ok(NpyHeader {
        dtype,
        shape,
        data_offset: end,
    })
}

/// The text after `'key':` up to the next top-level comma.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let pos = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[pos + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?;
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(&rest[..i]),
            _ => {}
        }
    }
    Some(rest)
}

/// Decode a whole `.npy` image into `f32` values (f64 is narrowed).
pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<(Vec<usize>, Vec<f32>), DataError> {
    let header = parse_header(bytes, path)?;
    let n = header.elements();
    let size = header.dtype.size();
    let need = header.data_offset + n * size;
    if bytes.len() < need {
        return Err(DataError::npy(
            path,
            format!(
                "truncated: shape {:?} needs {need} bytes, file has {}",
                header.shape,
                bytes.len()
            ),
        ));
    }
    let data = &bytes[header.data_offset..need];
    let values = match header.dtype {
        NpyDtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        NpyDtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
    };
    Ok((header.shape, values))
}

/// Read an array from `.npy`, or from `.npz` (the array named `feat`, else the first one).
pub(crate) fn read_array(path: &Path) -> Result<(Vec<usize>, Vec<f32>), DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if path.extension().is_some_and(|e| e == "npz") {
        let inner = npz_member(&bytes, path)?;
        decode(&inner, path)
    } else {
        decode(&bytes, path)
    }
}

/// Read only the header of a `.npy` or `.npz` file and check the file is long enough.
pub(crate) fn read_header(path: &Path) -> Result<NpyHeader, DataError> {
    if path.extension().is_some_and(|e| e == "npz") {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let inner = npz_member(&bytes, path)?;
        let h = parse_header(&inner, path)?;
        check_length(&h, inner.len() as u64, path)?;
        return Ok(h);
    }
    let mut file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let len = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let mut head = vec![0u8; 4096.min(len as usize)];
    file.read_exact(&mut head)
        .map_err(|e| DataError::io(path, e))?;
    let h = parse_header(&head, path)?;
    check_length(&h, len, path)?;
    Ok(h)
}

fn check_length(h: &NpyHeader, len: u64, path: &Path) -> Result<(), DataError> {
    let need = (h.data_offset + h.elements() * h.dtype.size()) as u64;
    if len < need {
        return Err(DataError::npy(
            path,
            format!(
                "truncated: shape {:?} needs {need} bytes, file has {len}",
                h.shape
            ),
        ));
    }
    Ok(())
}

fn npz_member(bytes: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| DataError::npy(path, format!("not a readable .npz archive: {e}")))?;
    if archive.is_empty() {
        return Err(DataError::npy(path, ".npz archive holds no array"));
    }
    let index = archive.index_for_name("feat.npy").unwrap_or(0);
    let mut member = archive
        .by_index(index)
        .map_err(|e| DataError::npy(path, format!("cannot open array in .npz: {e}")))?;
    let mut out = Vec::new();
    member
        .read_to_end(&mut out)
        .map_err(|e| DataError::npy(path, format!("cannot decompress array in .npz: {e}")))?;
    Ok(out)
}

/// Encode a little-endian `f32` array as `.npy` version 1.0 bytes.
pub fn encode_f32(shape: &[usize], data: &[f32]) -> Vec<u8> {
    let dims = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Write a little-endian `f32` array to `path` as `.npy` (atomically). For tests that build
/// data sets (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<(), DataError> {
    if shape.iter().product::<usize>() != data.len() {
        return Err(DataError::npy(
            path,
            format!("shape {shape:?} does not hold {} values", data.len()),
        ));
    }
    super::atomic::write_atomic(path, &encode_f32(shape, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_header_round_trips() {
        let bytes = encode_f32(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!((bytes.len() - 24) % 64, 0);
        let (shape, values) = decode(&bytes, Path::new("x.npy")).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(values[5], 6.0);
    }
}
