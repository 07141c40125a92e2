//! Safetensors reading: one or many memory-mapped shards (with or without
//! `model.safetensors.index.json`), tensors converted from bf16/f16/f32 to f32 (or kept as bf16
//! bits) on request, a few MiB at a time with the mapped pages released behind the copy.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

use super::error::EngineError;

/// Where one tensor lives.
#[derive(Debug, Clone)]
struct TensorEntry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range inside the file (header included in the offset).
    start: usize,
    end: usize,
}

/// A set of safetensors files seen as one name → tensor map.
pub struct WeightFiles {
    /// What errors about a missing tensor name: the index file, the single file or the folder.
    label: PathBuf,
    files: Vec<(PathBuf, Mmap)>,
    entries: HashMap<String, TensorEntry>,
}

impl WeightFiles {
    /// Opens the weights of a model folder: the shards named by `model.safetensors.index.json`
    /// when it exists, else every `*.safetensors` file in the folder.
    pub fn open_dir(dir: &Path) -> Result<WeightFiles, EngineError> {
        let index_path = dir.join("model.safetensors.index.json");
        let (label, paths) = if index_path.exists() {
            (index_path.clone(), shards_from_index(&index_path, dir)?)
        } else {
            let mut paths = Vec::new();
            let listing = std::fs::read_dir(dir).map_err(|e| EngineError::io(dir, e))?;
            for entry in listing {
                let path = entry.map_err(|e| EngineError::io(dir, e))?.path();
                if path.extension().is_some_and(|e| e == "safetensors") {
                    paths.push(path);
                }
            }
            paths.sort();
            if paths.is_empty() {
                return Err(EngineError::config(
                    dir,
                    "no *.safetensors weight files in this folder",
                ));
            }
            let label = if paths.len() == 1 {
                paths[0].clone()
            } else {
                dir.to_path_buf()
            };
            (label, paths)
        };
        WeightFiles::open(label, &paths)
    }

    /// Opens the given files; `label` names the set in "missing tensor" errors.
    pub fn open(label: PathBuf, paths: &[PathBuf]) -> Result<WeightFiles, EngineError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut entries = HashMap::new();
        for (file_index, path) in paths.iter().enumerate() {
            let file = File::open(path).map_err(|e| EngineError::io(path, e))?;
            // SAFETY: the weights are read-only inputs; a concurrent writer truncating them is
            // outside what any model loader can defend against (all mmap loaders share this).
            let map = unsafe { Mmap::map(&file) }.map_err(|e| EngineError::io(path, e))?;
            let (header_len, metadata) =
                SafeTensors::read_metadata(&map[..]).map_err(|e| EngineError::Safetensors {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let data_start = 8 + header_len;
            for (name, info) in metadata.tensors() {
                let entry = TensorEntry {
                    file: file_index,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start: data_start + info.data_offsets.0,
                    end: data_start + info.data_offsets.1,
                };
                if let Some(previous) = entries.insert(name.clone(), entry) {
                    return Err(EngineError::Safetensors {
                        path: path.clone(),
                        reason: format!(
                            "tensor {name:?} also appears in {}",
                            paths[previous.file].display()
                        ),
                    });
                }
            }
            files.push((path.clone(), map));
        }
        Ok(WeightFiles {
            label,
            files,
            entries,
        })
    }

    /// The path that names this set of files in errors.
    pub fn label(&self) -> &Path {
        &self.label
    }

    /// All tensor names, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The shape of a tensor, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// The file that holds a tensor (or the set's label when it is missing).
    pub fn file_of(&self, name: &str) -> &Path {
        match self.entries.get(name) {
            Some(e) => &self.files[e.file].0,
            None => &self.label,
        }
    }

    /// A bf16 tensor's raw bits, checking its shape; `None` when it is stored in another dtype
    /// (read it with `load_f32`).
    pub fn load_bf16(
        &self,
        name: &str,
        expected_shape: &[usize],
    ) -> Result<Option<Vec<u16>>, EngineError> {
        Ok(self
            .load_bf16_parts(name, expected_shape, 1)?
            .and_then(|mut parts| parts.pop()))
    }

    /// As `load_bf16`, split along the first dimension into `parts` equal tensors (one per
    /// expert of a fused stack), so the whole is never held twice.
    pub fn load_bf16_parts(
        &self,
        name: &str,
        expected_shape: &[usize],
        parts: usize,
    ) -> Result<Option<Vec<Vec<u16>>>, EngineError> {
        let (entry, map, bytes, width) = self.checked(name, expected_shape)?;
        if entry.dtype != Dtype::BF16 {
            return Ok(None);
        }
        let part_len = part_len(&entry.shape, parts);
        let mut out = Vec::with_capacity(parts);
        for part in 0..parts {
            let mut bits = vec![0u16; part_len];
            let first = part * part_len;
            convert(
                map,
                entry.start,
                bytes,
                width,
                first,
                &mut bits,
                |p: &[u8]| u16::from_le_bytes([p[0], p[1]]),
            );
            out.push(bits);
        }
        release_pages(map, entry.start, entry.end);
        Ok(Some(out))
    }

    /// Reads a tensor as f32, checking its shape.
    pub fn load_f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        let mut parts = self.load_f32_parts(name, expected_shape, 1)?;
        Ok(parts.pop().unwrap_or_default())
    }

    /// As `load_f32`, split along the first dimension into `parts` equal tensors.
    pub fn load_f32_parts(
        &self,
        name: &str,
        expected_shape: &[usize],
        parts: usize,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let (entry, map, bytes, width) = self.checked(name, expected_shape)?;
        let part_len = part_len(&entry.shape, parts);
        let mut out = Vec::with_capacity(parts);
        for part in 0..parts {
            let mut values = vec![0f32; part_len];
            let first = part * part_len;
            let start = entry.start;
            match entry.dtype {
                Dtype::BF16 => convert(
                    map,
                    start,
                    bytes,
                    width,
                    first,
                    &mut values,
                    |p: &[u8]| f32::from_bits((u16::from_le_bytes([p[0], p[1]]) as u32) << 16),
                ),
                Dtype::F16 => convert(
                    map,
                    start,
                    bytes,
                    width,
                    first,
                    &mut values,
                    |p: &[u8]| half::f16::from_bits(u16::from_le_bytes([p[0], p[1]])).to_f32(),
                ),
                _ => convert(
                    map,
                    start,
                    bytes,
                    width,
                    first,
                    &mut values,
                    |p: &[u8]| f32::from_le_bytes([p[0], p[1], p[2], p[3]]),
                ),
            }
            out.push(values);
        }
        release_pages(map, entry.start, entry.end);
        Ok(out)
    }

    /// A tensor's entry, mapping and bytes, after checking its shape, dtype and extent.
    fn checked(
        &self,
        name: &str,
        expected_shape: &[usize],
    ) -> Result<(&TensorEntry, &Mmap, &[u8], usize), EngineError> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| EngineError::MissingTensor {
                path: self.label.clone(),
                tensor: name.to_string(),
            })?;
        let (path, map) = &self.files[entry.file];
        if entry.shape != expected_shape {
            return Err(EngineError::TensorShape {
                path: path.clone(),
                tensor: name.to_string(),
                found: entry.shape.clone(),
                expected: expected_shape.to_vec(),
            });
        }
        let bytes = map
            .get(entry.start..entry.end)
            .ok_or_else(|| EngineError::Safetensors {
                path: path.clone(),
                reason: format!("tensor {name:?} lies outside the file"),
            })?;
        let count: usize = entry.shape.iter().product();
        let width = match entry.dtype {
            Dtype::BF16 | Dtype::F16 => 2,
            Dtype::F32 => 4,
            other => {
                return Err(EngineError::TensorDtype {
                    path: path.clone(),
                    tensor: name.to_string(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        if bytes.len() != count * width {
            return Err(EngineError::Safetensors {
                path: path.clone(),
                reason: format!(
                    "tensor {name:?} holds {} bytes, its shape needs {}",
                    bytes.len(),
                    count * width
                ),
            });
        }
        Ok((entry, map, bytes, width))
    }
}

/// Elements of one of `parts` equal slices along the first dimension (the callers pass a
/// shape they built with that many rows, so the division is exact).
fn part_len(shape: &[usize], parts: usize) -> usize {
    shape.iter().product::<usize>() / parts.max(1)
}

/// Source bytes converted between two page releases: the mapped pages of a tensor being read
/// stay resident until released, so a whole-tensor copy would hold the tensor twice.
const SEGMENT_BYTES: usize = 4 << 20;

/// `out[i] = decode(bytes[(first + i)·width ..][..width])` for the elements
/// `first..first + out.len()` of a tensor whose bytes begin at `start` in `map`; each
/// segment's pages are released once converted.
fn convert<T: Send>(
    map: &Mmap,
    start: usize,
    bytes: &[u8],
    width: usize,
    first: usize,
    out: &mut [T],
    decode: impl Fn(&[u8]) -> T + Sync,
) {
    const TASK: usize = 1 << 16;
    let per_segment = (SEGMENT_BYTES / width).max(1);
    for (index, segment) in out.chunks_mut(per_segment).enumerate() {
        let from = (first + index * per_segment) * width;
        let src = &bytes[from..from + segment.len() * width];
        segment
            .par_chunks_mut(TASK)
            .zip(src.par_chunks(TASK * width))
            .for_each(|(o, b)| {
                for (v, e) in o.iter_mut().zip(b.chunks_exact(width)) {
                    *v = decode(e);
                }
            });
        release_pages(map, start + from, start + from + src.len());
    }
}

/// Drops the mapped pages of a tensor already copied, so they stop counting in the resident set.
fn release_pages(map: &Mmap, start: usize, end: usize) {
    const PAGE: usize = 4096;
    let first = start.div_ceil(PAGE) * PAGE;
    let last = end / PAGE * PAGE;
    if last > first {
        // SAFETY: the mapping is private and read-only; DontNeed only makes later reads of these
        // pages fault them in again from the file, which is still there.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
        };
    }
}

fn shards_from_index(index_path: &Path, dir: &Path) -> Result<Vec<PathBuf>, EngineError> {
    let text = std::fs::read_to_string(index_path).map_err(|e| EngineError::io(index_path, e))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| EngineError::config(index_path, format!("invalid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| EngineError::config(index_path, "missing object \"weight_map\""))?;
    let mut names: Vec<&str> = Vec::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            EngineError::config(
                index_path,
                format!("weight_map[{tensor:?}] is not a file name"),
            )
        })?;
        if file.contains('/') || file.contains('\\') || file.starts_with('.') {
            return Err(EngineError::config(
                index_path,
                format!("weight_map[{tensor:?}] names {file:?}, outside the folder"),
            ));
        }
        if !names.contains(&file) {
            names.push(file);
        }
    }
    names.sort_unstable();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}
