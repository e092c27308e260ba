//! Per-image feature stores: one memory-mapped safetensors file, or a directory of `.npy`
//! files per image. Only requested rows are copied out, so a 100k-image file is never read
//! into memory as a whole.
//!
//! Layouts:
//! - `features.safetensors`: `fc` f32 `[N, D]`, optional `att` f32 `[N, R, D_att]`; the image
//!   id of row `i` is entry `i` of `features.ids.json` (a JSON array of strings or integers).
//! - `features/` (self-critical.pytorch): `fc/<id>.npy` `[D]` and optional `att/<id>.npz`
//!   (array `feat`) or `att/<id>.npy`, `[R, D_att]` or `[H, W, D_att]` (flattened to `H·W`
//!   regions). f32 or f64, little-endian.
//!
//! NaN/inf: every copied row is checked, and a safetensors store no larger than
//! [`FULL_SCAN_BYTES`] is scanned completely when it is opened.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::error::{examples, DataError};
use super::npy;

/// Safetensors stores up to this size are checked for NaN/inf in full at open time.
pub const FULL_SCAN_BYTES: usize = 1 << 30;

/// Where one tensor lives inside the memory map.
#[derive(Debug, Clone)]
struct TensorLoc {
    offset: usize,
    rows: usize,
    /// Values per row (`D` for fc, `R·D` for att).
    row_len: usize,
}

#[derive(Debug)]
pub(crate) struct SafetensorsStore {
    path: PathBuf,
    mmap: Mmap,
    fc: TensorLoc,
    fc_dim: usize,
    att: Option<(TensorLoc, usize, usize)>,
    ids: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct NpyStore {
    dir: PathBuf,
    ids: Vec<String>,
    fc_dim: usize,
    att: Option<(usize, usize)>,
    att_files: Vec<PathBuf>,
}

/// The features of a data set.
#[derive(Debug)]
pub(crate) enum FeatureStore {
    Safetensors(SafetensorsStore),
    Npy(NpyStore),
}

/// Read `features.ids.json`: a JSON array of strings or integers.
pub(crate) fn read_ids(path: &Path) -> Result<Vec<String>, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let values: Vec<serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| DataError::json(path, &e))?;
    let mut ids = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        match v {
            serde_json::Value::String(s) => ids.push(s.clone()),
            serde_json::Value::Number(n) => ids.push(n.to_string()),
            other => {
                return Err(DataError::invalid(
                    path,
                    format!("entry {i} is {other}; image ids must be strings or integers"),
                ))
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = ids.iter().find(|id| !seen.insert(id.as_str())) {
        return Err(DataError::invalid(
            path,
            format!("image id {dup} appears twice; every feature row needs its own id"),
        ));
    }
    Ok(ids)
}

fn st_err(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Safetensors {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

impl SafetensorsStore {
    /// Memory-map and validate `path`; `ids_path` holds the row ids.
    pub(crate) fn open(path: &Path, ids_path: &Path) -> Result<Self, DataError> {
        let ids = read_ids(ids_path)?;
        let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
        // SAFETY: the map is read-only; the data set files are not modified while open
        // (all writers in this crate replace files by rename, leaving old maps intact).
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| DataError::io(path, e))?;
        let base = mmap.as_ptr() as usize;
        let st = SafeTensors::deserialize(&mmap).map_err(|e| st_err(path, e.to_string()))?;
        let locate = |name: &str| -> Result<Option<(TensorLoc, Vec<usize>)>, DataError> {
            let view = match st.tensor(name) {
                Ok(v) => v,
                Err(_) => return Ok(None),
            };
            if view.dtype() != Dtype::F32 {
                return Err(DataError::shape(
                    path,
                    format!(
                        "tensor `{name}` is {:?}; store features as F32",
                        view.dtype()
                    ),
                ));
            }
            let shape = view.shape().to_vec();
            let rows = shape.first().copied().unwrap_or(0);
            let row_len = shape.iter().skip(1).product::<usize>();
            Ok(Some((
                TensorLoc {
                    offset: view.data().as_ptr() as usize - base,
                    rows,
                    row_len,
                },
                shape,
            )))
        };
        let (fc, fc_shape) = locate("fc")?.ok_or_else(|| {
            DataError::shape(
                path,
                format!(
                    "no tensor `fc`; found {:?}. Store global features as `fc` f32 [N, D]",
                    st.names()
                ),
            )
        })?;
        if fc_shape.len() != 2 || fc_shape[1] == 0 {
            return Err(DataError::shape(
                path,
                format!("tensor `fc` has shape {fc_shape:?}; expected [N, D] with D > 0"),
            ));
        }
        let fc_dim = fc_shape[1];
        let att = match locate("att")? {
            None => None,
            Some((loc, shape)) => {
                if shape.len() != 3 || shape[1] == 0 || shape[2] == 0 {
                    return Err(DataError::shape(
                        path,
                        format!("tensor `att` has shape {shape:?}; expected [N, R, D]"),
                    ));
                }
                if shape[0] != fc.rows {
                    return Err(DataError::shape(
                        path,
                        format!(
                            "tensor `att` has {} rows but `fc` has {}; both need one row per image",
                            shape[0], fc.rows
                        ),
                    ));
                }
                Some((loc, shape[1], shape[2]))
            }
        };
        if ids.len() != fc.rows {
            return Err(DataError::shape(
                ids_path,
                format!(
                    "{} ids but {} has {} feature rows; the id list must name every row in order",
                    ids.len(),
                    path.display(),
                    fc.rows
                ),
            ));
        }
        drop(st);
        let store = SafetensorsStore {
            path: path.to_path_buf(),
            mmap,
            fc,
            fc_dim,
            att,
            ids,
        };
        if store.mmap.len() <= FULL_SCAN_BYTES {
            store.scan_all()?;
        }
        Ok(store)
    }

    fn row_slice(&self, loc: &TensorLoc, row: usize) -> Result<&[u8], DataError> {
        if row >= loc.rows {
            return Err(DataError::RowOutOfRange {
                path: self.path.clone(),
                row,
                rows: loc.rows,
            });
        }
        let start = loc.offset + row * loc.row_len * 4;
        Ok(&self.mmap[start..start + loc.row_len * 4])
    }

    fn copy_rows(
        &self,
        loc: &TensorLoc,
        name: &str,
        rows: &[usize],
    ) -> Result<Vec<f32>, DataError> {
        let mut out = Vec::with_capacity(rows.len() * loc.row_len);
        for &row in rows {
            let bytes = self.row_slice(loc, row)?;
            let start = out.len();
            out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
            if out[start..].iter().any(|v| !v.is_finite()) {
                return Err(self.non_finite(name, row));
            }
        }
        Ok(out)
    }

    fn non_finite(&self, name: &str, row: usize) -> DataError {
        DataError::NonFinite {
            path: self.path.clone(),
            tensor: name.to_string(),
            row,
            id: self.ids.get(row).cloned().unwrap_or_default(),
        }
    }

    fn scan_all(&self) -> Result<(), DataError> {
        let mut tensors = vec![("fc", &self.fc)];
        if let Some((loc, _, _)) = &self.att {
            tensors.push(("att", loc));
        }
        for (name, loc) in tensors {
            for row in 0..loc.rows {
                let bytes = self.row_slice(loc, row)?;
                let bad = bytes.chunks_exact(4).any(|c| {
                    // NaN and ±inf are exactly the values whose exponent bits are all ones.
                    let bits = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    bits & 0x7f80_0000 == 0x7f80_0000
                });
                if bad {
                    return Err(self.non_finite(name, row));
                }
            }
        }
        Ok(())
    }
}

impl NpyStore {
    /// Check that `dir/fc/<id>.npy` exists for every id (headers and lengths included) and
    /// that att files, when the `att` directory exists, are present with one shape.
    pub(crate) fn open(dir: &Path, ids: Vec<String>) -> Result<Self, DataError> {
        let fc_dir = dir.join("fc");
        if !fc_dir.is_dir() {
            return Err(DataError::shape(
                dir,
                "feature directory has no `fc/` subdirectory; expected fc/<id>.npy per image",
            ));
        }
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !fc_dir.join(format!("{id}.npy")).is_file())
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(DataError::MissingFeatures {
                path: fc_dir,
                missing: missing.len(),
                examples: examples(&missing, 5),
            });
        }
        let mut fc_dim = None;
        for id in &ids {
            let path = fc_dir.join(format!("{id}.npy"));
            let header = npy::read_header(&path)?;
            let d = header.elements();
            if header.shape.iter().filter(|&&s| s > 1).count() > 1 || d == 0 {
                return Err(DataError::shape(
                    &path,
                    format!("fc array has shape {:?}; expected [D]", header.shape),
                ));
            }
            match fc_dim {
                None => fc_dim = Some((d, path)),
                Some((expected, ref first)) if expected != d => {
                    return Err(DataError::shape(
                        &path,
                        format!(
                            "fc dimension {d} differs from {expected} in {}; all images need the same feature size",
                            first.display()
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let fc_dim = fc_dim.map(|(d, _)| d).unwrap_or(0);
        let att_dir = dir.join("att");
        let (att, att_files) = if att_dir.is_dir() {
            let mut files = Vec::with_capacity(ids.len());
            let mut missing = Vec::new();
            for id in &ids {
                let npz = att_dir.join(format!("{id}.npz"));
                let npy_path = att_dir.join(format!("{id}.npy"));
                if npz.is_file() {
                    files.push(npz);
                } else if npy_path.is_file() {
                    files.push(npy_path);
                } else {
                    missing.push(id.clone());
                }
            }
            if !missing.is_empty() {
                return Err(DataError::MissingFeatures {
                    path: att_dir,
                    missing: missing.len(),
                    examples: examples(&missing, 5),
                });
            }
            let shape = match files.first() {
                Some(first) => Some(att_shape(first, &npy::read_header(first)?.shape)?),
                None => None,
            };
            (shape, files)
        } else {
            (None, Vec::new())
        };
        Ok(NpyStore {
            dir: dir.to_path_buf(),
            ids,
            fc_dim,
            att,
            att_files,
        })
    }

    fn fc_path(&self, row: usize) -> Result<PathBuf, DataError> {
        self.ids
            .get(row)
            .map(|id| self.dir.join("fc").join(format!("{id}.npy")))
            .ok_or_else(|| DataError::RowOutOfRange {
                path: self.dir.clone(),
                row,
                rows: self.ids.len(),
            })
    }
}

fn att_shape(path: &Path, shape: &[usize]) -> Result<(usize, usize), DataError> {
    if shape.len() < 2 || shape.contains(&0) {
        return Err(DataError::shape(
            path,
            format!("att array has shape {shape:?}; expected [R, D] or [H, W, D]"),
        ));
    }
    let d = shape[shape.len() - 1];
    Ok((shape[..shape.len() - 1].iter().product(), d))
}

fn check_finite(
    values: &[f32],
    path: &Path,
    tensor: &str,
    row: usize,
    id: &str,
) -> Result<(), DataError> {
    if values.iter().any(|v| !v.is_finite()) {
        return Err(DataError::NonFinite {
            path: path.to_path_buf(),
            tensor: tensor.to_string(),
            row,
            id: id.to_string(),
        });
    }
    Ok(())
}

impl FeatureStore {
    /// Image ids in row order.
    pub(crate) fn ids(&self) -> &[String] {
        match self {
            FeatureStore::Safetensors(s) => &s.ids,
            FeatureStore::Npy(s) => &s.ids,
        }
    }

    /// id → row.
    pub(crate) fn row_index(&self) -> HashMap<&str, usize> {
        self.ids()
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect()
    }

    /// The file or directory the features come from.
    pub(crate) fn path(&self) -> &Path {
        match self {
            FeatureStore::Safetensors(s) => &s.path,
            FeatureStore::Npy(s) => &s.dir,
        }
    }

    pub(crate) fn fc_dim(&self) -> usize {
        match self {
            FeatureStore::Safetensors(s) => s.fc_dim,
            FeatureStore::Npy(s) => s.fc_dim,
        }
    }

    pub(crate) fn att_shape(&self) -> Option<(usize, usize)> {
        match self {
            FeatureStore::Safetensors(s) => s.att.as_ref().map(|(_, r, d)| (*r, *d)),
            FeatureStore::Npy(s) => s.att,
        }
    }

    pub(crate) fn fc_rows(&self, rows: &[usize]) -> Result<Vec<f32>, DataError> {
        match self {
            FeatureStore::Safetensors(s) => s.copy_rows(&s.fc, "fc", rows),
            FeatureStore::Npy(s) => {
                let mut out = Vec::with_capacity(rows.len() * s.fc_dim);
                for &row in rows {
                    let path = s.fc_path(row)?;
                    let (_, values) = npy::read_array(&path)?;
                    if values.len() != s.fc_dim {
                        return Err(DataError::shape(
                            &path,
                            format!("fc has {} values, expected {}", values.len(), s.fc_dim),
                        ));
                    }
                    check_finite(&values, &path, "fc", row, &s.ids[row])?;
                    out.extend_from_slice(&values);
                }
                Ok(out)
            }
        }
    }

    pub(crate) fn att_rows(&self, rows: &[usize]) -> Result<Option<Vec<f32>>, DataError> {
        match self {
            FeatureStore::Safetensors(s) => match &s.att {
                None => Ok(None),
                Some((loc, _, _)) => s.copy_rows(loc, "att", rows).map(Some),
            },
            FeatureStore::Npy(s) => {
                let Some((r, d)) = s.att else {
                    return Ok(None);
                };
                let mut out = Vec::with_capacity(rows.len() * r * d);
                for &row in rows {
                    let path = s
                        .att_files
                        .get(row)
                        .ok_or_else(|| DataError::RowOutOfRange {
                            path: s.dir.clone(),
                            row,
                            rows: s.ids.len(),
                        })?;
                    let (shape, values) = npy::read_array(path)?;
                    if att_shape(path, &shape)? != (r, d) {
                        return Err(DataError::shape(
                            path,
                            format!(
                                "att has shape {shape:?}, expected {r} regions of dimension {d} like the other images; pad or crop to one shape"
                            ),
                        ));
                    }
                    check_finite(&values, path, "att", row, &s.ids[row])?;
                    out.extend_from_slice(&values);
                }
                Ok(Some(out))
            }
        }
    }
}

/// Write `features.safetensors` (`fc` f32 `[N, fc_dim]`, optional `att` f32 `[N, R, D]`)
/// and `features.ids.json` into `dir`, both atomically. `ids` gives the image id of each row.
pub fn write_safetensors(
    dir: &Path,
    ids: &[String],
    fc: &[f32],
    fc_dim: usize,
    att: Option<(&[f32], usize, usize)>,
) -> Result<(), DataError> {
    use safetensors::tensor::TensorView;
    let path = dir.join(super::dataset::FEATURES_SAFETENSORS);
    let n = ids.len();
    if fc.len() != n * fc_dim {
        return Err(DataError::shape(
            &path,
            format!("fc holds {} values, not {n} rows of {fc_dim}", fc.len()),
        ));
    }
    let to_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let fc_bytes = to_bytes(fc);
    let att_bytes = match att {
        Some((a, r, d)) if a.len() != n * r * d => {
            return Err(DataError::shape(
                &path,
                format!("att holds {} values, not {n} rows of {r}x{d}", a.len()),
            ))
        }
        Some((a, r, d)) => Some((to_bytes(a), r, d)),
        None => None,
    };
    let err = |e: safetensors::SafeTensorError| st_err(&path, e.to_string());
    let mut tensors = vec![(
        "fc".to_string(),
        TensorView::new(Dtype::F32, vec![n, fc_dim], &fc_bytes).map_err(err)?,
    )];
    if let Some((bytes, r, d)) = &att_bytes {
        tensors.push((
            "att".to_string(),
            TensorView::new(Dtype::F32, vec![n, *r, *d], bytes).map_err(err)?,
        ));
    }
    let bytes = safetensors::tensor::serialize(tensors, None).map_err(err)?;
    super::atomic::write_atomic(&path, &bytes)?;
    super::atomic::write_json_atomic(&dir.join(super::dataset::FEATURES_IDS), &ids)
}

/// [`write_safetensors`] for stores too large to hold twice in memory (the COCO-shaped set's
/// regions): `fill(i, fc_row, att_row)` writes image `i`'s rows (`att_row` is empty without
/// regions). The regions go to the file as they are made; the fc rows, small, are kept and
/// written after them (`att` at data offset 0, then `fc`). Both files are written atomically.
pub(crate) fn write_safetensors_streamed(
    dir: &Path,
    ids: &[String],
    fc_dim: usize,
    att: Option<(usize, usize)>,
    mut fill: impl FnMut(usize, &mut [f32], &mut [f32]) -> Result<(), DataError>,
) -> Result<(), DataError> {
    use std::io::Write;
    let path = dir.join(super::dataset::FEATURES_SAFETENSORS);
    let io = |e: std::io::Error| DataError::io(&path, e);
    let n = ids.len();
    let att_len = att.map_or(0, |(r, d)| r * d);
    let att_bytes = n * att_len * 4;
    let fc_bytes = n * fc_dim * 4;
    let mut header = serde_json::Map::new();
    let entry = |shape: Vec<usize>, start: usize, end: usize| serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [start, end]});
    if let Some((r, d)) = att {
        header.insert("att".into(), entry(vec![n, r, d], 0, att_bytes));
    }
    header.insert(
        "fc".into(),
        entry(vec![n, fc_dim], att_bytes, att_bytes + fc_bytes),
    );
    let mut header = serde_json::to_vec(&header)
        .map_err(|e| st_err(&path, format!("cannot serialize the header: {e}")))?;
    // The data starts 8-byte aligned, as safetensors' own writer pads it.
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let tmp = tempfile::Builder::new()
        .prefix(".features.safetensors.tmp-")
        .tempfile_in(dir)
        .map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
    out.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    out.write_all(&header).map_err(io)?;
    let mut fc = vec![0f32; n * fc_dim];
    let mut att_row = vec![0f32; att_len];
    let mut row_bytes = Vec::with_capacity(att_len * 4);
    for (i, fc_row) in fc.chunks_exact_mut(fc_dim.max(1)).enumerate().take(n) {
        fill(i, fc_row, &mut att_row)?;
        row_bytes.clear();
        row_bytes.extend(att_row.iter().flat_map(|x| x.to_le_bytes()));
        out.write_all(&row_bytes).map_err(io)?;
    }
    for x in &fc {
        out.write_all(&x.to_le_bytes()).map_err(io)?;
    }
    out.flush().map_err(io)?;
    drop(out);
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(&path).map_err(|e| io(e.error))?;
    super::atomic::write_json_atomic(&dir.join(super::dataset::FEATURES_IDS), &ids)
}
