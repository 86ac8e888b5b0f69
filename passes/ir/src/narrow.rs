//! Narrow constants: weights kept on the GPU in fewer than four bytes an element, decoded by the kernels that
//! read them.
//!
//! Two kinds exist. A float16 or bfloat16 constant (its logical dtype says which; its host data holds the values,
//! which lie on the type's grid) is stored as two-byte encodings, two to a 32-bit word, low half first. A
//! block-quantized constant ([`Blocks`]) holds one unsigned `bits`-wide code per element and, per block of
//! `block` consecutive elements of a row, a scale and a zero point: element = (code − zero) · scale. Its rows
//! are the tensor's elements taken `row` at a time in order, so any reshape keeps the layout; quantizing along
//! another axis than the last is a permuted constant read through a view.
//!
//! [`BlockLayout`] is the one description of how a [`Blocks`] constant lies in its GPU buffer (the weights writer
//! packs by it and the emitter decodes by it): rows of codes padded to whole words, then the scales (two float16
//! a word, or one float32), then the zero-point codes when there is one per block.

use crate::DType;

/// Zero points of a [`Blocks`] constant, as codes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Zeros {
    /// One zero point for every block (symmetric quantization: `2^(bits-1)` for codes of a signed type).
    All(u8),
    /// One per block, in scale order.
    Blocks(Vec<u8>),
}

/// A block-quantized constant. See the module doc.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocks {
    /// Code width: 2, 4 or 8.
    pub bits: u32,
    /// Elements per row; the tensor holds a whole number of rows.
    pub row: usize,
    /// Elements per block along a row; a row's last block may be shorter.
    pub block: usize,
    /// One unsigned code per element, below `2^bits`.
    pub codes: Vec<u8>,
    /// One scale per block, `[rows, blocks_per_row]` in order.
    pub scales: Vec<f32>,
    /// How scales are stored: float16 (their values lie on its grid) or float32.
    pub scale_dtype: DType,
    pub zeros: Zeros,
}

/// Where the parts of a [`Blocks`] constant lie in its buffer, in 32-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockLayout {
    pub bits: u32,
    pub row: usize,
    pub block: usize,
    pub blocks_per_row: usize,
    /// Words per row of codes: rows start at word boundaries.
    pub row_words: usize,
    /// The first word of the scales, and whether they are float16 pairs (else one float32 a word).
    pub scales_at: usize,
    pub scale_f16: bool,
    /// The first word of the zero-point codes (packed as the codes are, in scale order), or the one zero point.
    pub zeros: ZeroLayout,
    pub words: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZeroLayout {
    All(u8),
    At(usize),
}

impl Blocks {
    pub fn numel(&self) -> usize {
        self.codes.len()
    }

    pub fn rows(&self) -> usize {
        self.codes.len() / self.row.max(1)
    }

    pub fn blocks_per_row(&self) -> usize {
        self.row.div_ceil(self.block.max(1))
    }

    /// The zero point of block `b` (in scale order).
    pub fn zero(&self, b: usize) -> u8 {
        match &self.zeros {
            Zeros::All(z) => *z,
            Zeros::Blocks(z) => z[b],
        }
    }

    /// The block of element `i`.
    pub fn block_of(&self, i: usize) -> usize {
        (i / self.row) * self.blocks_per_row() + (i % self.row) / self.block
    }

    /// Element `i`'s value: (code − zero) · scale, in f32 as the kernels compute it.
    pub fn value(&self, i: usize) -> f32 {
        let b = self.block_of(i);
        (self.codes[i] as f32 - self.zero(b) as f32) * self.scales[b]
    }

    /// Every element's value.
    pub fn decode(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.value(i)).collect()
    }

    /// What is wrong with it, if anything: the checks every constructor's input must pass before a kernel reads
    /// it (sizes consistent, codes and zero points within `bits`, scales finite).
    pub fn check(&self) -> Result<(), String> {
        if ![2, 4, 8].contains(&self.bits) {
            return Err(format!("{}-bit codes (2, 4 and 8 are supported)", self.bits));
        }
        if self.row == 0 || self.block == 0 || !self.codes.len().is_multiple_of(self.row) {
            return Err(format!("{} codes do not make rows of {} (block {})", self.codes.len(), self.row, self.block));
        }
        let nb = self.rows() * self.blocks_per_row();
        if self.scales.len() != nb {
            return Err(format!("{} scales for {nb} blocks", self.scales.len()));
        }
        if let Zeros::Blocks(z) = &self.zeros {
            if z.len() != nb {
                return Err(format!("{} zero points for {nb} blocks", z.len()));
            }
        }
        let limit = 1u32 << self.bits;
        let zeros = match &self.zeros {
            Zeros::All(z) => std::slice::from_ref(z),
            Zeros::Blocks(z) => z.as_slice(),
        };
        if self.codes.iter().chain(zeros).any(|&c| c as u32 >= limit) {
            return Err(format!("a code or zero point does not fit {} bits", self.bits));
        }
        if !matches!(self.scale_dtype, DType::F32 | DType::F16) {
            return Err(format!("{} scales (float32 and float16 are supported)", self.scale_dtype));
        }
        if self.scales.iter().any(|s| !s.is_finite()) {
            return Err("a scale is not finite".into());
        }
        Ok(())
    }

    pub fn layout(&self) -> BlockLayout {
        let per_word = (32 / self.bits) as usize;
        let row_words = self.row.div_ceil(per_word);
        let blocks = self.rows() * self.blocks_per_row();
        let scale_f16 = self.scale_dtype == DType::F16;
        let scales_at = row_words * self.rows();
        let scale_words = if scale_f16 { blocks.div_ceil(2) } else { blocks };
        let (zeros, zero_words) = match &self.zeros {
            Zeros::All(z) => (ZeroLayout::All(*z), 0),
            Zeros::Blocks(_) => (ZeroLayout::At(scales_at + scale_words), blocks.div_ceil(per_word)),
        };
        BlockLayout {
            bits: self.bits,
            row: self.row,
            block: self.block,
            blocks_per_row: self.blocks_per_row(),
            row_words,
            scales_at,
            scale_f16,
            zeros,
            words: scales_at + scale_words + zero_words,
        }
    }

    /// The buffer contents, as [`Self::layout`] describes them.
    pub fn words(&self) -> Vec<u32> {
        let l = self.layout();
        let per_word = (32 / self.bits) as usize;
        let mut w = vec![0u32; l.words];
        let mut put = |base: usize, k: usize, code: u8| {
            w[base + k / per_word] |= (code as u32) << ((k % per_word) as u32 * self.bits);
        };
        for r in 0..self.rows() {
            for k in 0..self.row {
                put(r * l.row_words, k, self.codes[r * self.row + k]);
            }
        }
        if let (ZeroLayout::At(at), Zeros::Blocks(z)) = (l.zeros, &self.zeros) {
            for (b, &c) in z.iter().enumerate() {
                put(at, b, c);
            }
        }
        for (b, &s) in self.scales.iter().enumerate() {
            if l.scale_f16 {
                w[l.scales_at + b / 2] |= (f16_bits(s) as u32) << (16 * (b % 2));
            } else {
                w[l.scales_at + b] = s.to_bits();
            }
        }
        w
    }

    /// Rows `r0..r1`.
    pub fn rows_range(&self, r0: usize, r1: usize) -> Blocks {
        let nb = self.blocks_per_row();
        Blocks {
            codes: self.codes[r0 * self.row..r1 * self.row].to_vec(),
            scales: self.scales[r0 * nb..r1 * nb].to_vec(),
            zeros: match &self.zeros {
                Zeros::All(z) => Zeros::All(*z),
                Zeros::Blocks(z) => Zeros::Blocks(z[r0 * nb..r1 * nb].to_vec()),
            },
            ..self.clone_header()
        }
    }

    /// The parts' rows one after the other, when they share a format (bits, row, block, scale type, kind of
    /// zero point); `None` otherwise.
    pub fn concat_rows(parts: &[&Blocks]) -> Option<Blocks> {
        let first = parts.first()?;
        let same = |b: &&Blocks| {
            b.bits == first.bits
                && b.row == first.row
                && b.block == first.block
                && b.scale_dtype == first.scale_dtype
                && match (&b.zeros, &first.zeros) {
                    (Zeros::All(x), Zeros::All(y)) => x == y,
                    (Zeros::Blocks(_), Zeros::Blocks(_)) => true,
                    _ => false,
                }
        };
        if !parts.iter().all(same) {
            return None;
        }
        let mut out = first.clone_header();
        for p in parts {
            out.codes.extend_from_slice(&p.codes);
            out.scales.extend_from_slice(&p.scales);
            if let (Zeros::Blocks(o), Zeros::Blocks(z)) = (&mut out.zeros, &p.zeros) {
                o.extend_from_slice(z);
            }
        }
        Some(out)
    }

    /// The format without data.
    fn clone_header(&self) -> Blocks {
        Blocks {
            bits: self.bits,
            row: self.row,
            block: self.block,
            codes: vec![],
            scales: vec![],
            scale_dtype: self.scale_dtype,
            zeros: match self.zeros {
                Zeros::All(z) => Zeros::All(z),
                Zeros::Blocks(_) => Zeros::Blocks(vec![]),
            },
        }
    }

    /// Quantizes rows of `row` values (`x.len()` a multiple of it) symmetrically in blocks of `block`: each
    /// block's scale maps its value of largest magnitude onto the most negative code, `−2^(bits−1)` (the other
    /// values then fall in `[−2^(bits−1), 2^(bits−1)]`, clamped to the codes), stored as `scale_dtype`; codes are
    /// offset by the zero point `2^(bits−1)`.
    pub fn quantize(x: &[f32], row: usize, block: usize, bits: u32, scale_dtype: DType) -> Blocks {
        let half = 1i32 << (bits - 1);
        let (max_code, zero) = ((1i32 << bits) - 1, half as u8);
        let nb = row.div_ceil(block);
        let rows = x.len() / row;
        let mut codes = vec![0u8; x.len()];
        let mut scales = Vec::with_capacity(rows * nb);
        for r in 0..rows {
            for b in 0..nb {
                let (k0, k1) = (r * row + b * block, (r * row + ((b + 1) * block).min(row)));
                let m = x[k0..k1].iter().copied().fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
                let mut s = m / -(half as f32);
                if scale_dtype == DType::F16 {
                    s = DType::F16.round(s, false);
                }
                scales.push(s);
                let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
                for k in k0..k1 {
                    codes[k] = ((x[k] * inv).round_ties_even() as i32 + half).clamp(0, max_code) as u8;
                }
            }
        }
        Blocks { bits, row, block, codes, scales, scale_dtype, zeros: Zeros::All(zero) }
    }
}

/// Quantized data as a model lays it out, turned into a [`Blocks`] constant: the codes (unsigned, row-major over
/// `shape`), their scales and zero points per block, and how the stored constant is read back in `shape`'s
/// layout.
pub struct Quantized<'a> {
    pub shape: &'a [usize],
    pub bits: u32,
    /// Unsigned codes, row-major over `shape`.
    pub codes: Vec<u8>,
    pub scales: Vec<f32>,
    pub scale_dtype: DType,
    /// Per block (in the scales' order) or one for all.
    pub zeros: Zeros,
}

/// A [`Blocks`] constant and its place: stored with the shape `stored`, and read as the model's tensor through
/// the permutation `perm` (`model axis i = stored axis perm[i]`; `None` when they are the same).
pub struct Placed {
    pub blocks: Blocks,
    pub stored: Vec<usize>,
    pub perm: Option<Vec<usize>>,
}

impl Quantized<'_> {
    /// Blocks of `block` consecutive elements along `axis` (scales shaped as `shape` with that axis
    /// `ceil(len / block)` long): stored with the axis last.
    pub fn blocked(self, axis: usize, block: usize) -> Placed {
        let r = self.shape.len();
        let mut order: Vec<usize> = (0..r).filter(|&d| d != axis).collect();
        order.push(axis);
        let mut sshape = self.shape.to_vec();
        sshape[axis] = self.shape[axis].div_ceil(block);
        let codes = permute(&self.codes, self.shape, &order);
        let scales = permute(&self.scales, &sshape, &order);
        let zeros = match self.zeros {
            Zeros::Blocks(z) => Zeros::Blocks(permute(&z, &sshape, &order)),
            all => all,
        };
        let stored: Vec<usize> = order.iter().map(|&d| self.shape[d]).collect();
        let row = self.shape[axis];
        let blocks = Blocks { bits: self.bits, row, block, codes, scales, scale_dtype: self.scale_dtype, zeros };
        Placed { blocks, perm: inverse(&order), stored }
    }

    /// One scale (and zero point) for the whole tensor: stored as it lies, each row of its last axis one block
    /// (repeating the scale), so that no block is longer than a row.
    pub fn per_tensor(self) -> Placed {
        let row = self.shape.last().copied().unwrap_or(1).max(1);
        let rows = self.codes.len() / row;
        let zeros = match self.zeros {
            Zeros::Blocks(z) => Zeros::All(z.first().copied().unwrap_or(0)),
            all => all,
        };
        let scales = vec![self.scales.first().copied().unwrap_or(0.0); rows];
        let blocks = Blocks {
            bits: self.bits,
            row,
            block: row,
            codes: self.codes,
            scales,
            scale_dtype: self.scale_dtype,
            zeros,
        };
        Placed { blocks, stored: self.shape.to_vec(), perm: None }
    }

    /// One scale (and zero point) per index along `axis`, shared by every element there: stored with the axis
    /// first, each of its rows one block.
    pub fn per_axis(self, axis: usize) -> Placed {
        let r = self.shape.len();
        let mut order = vec![axis];
        order.extend((0..r).filter(|&d| d != axis));
        let codes = permute(&self.codes, self.shape, &order);
        let stored: Vec<usize> = order.iter().map(|&d| self.shape[d]).collect();
        let row = (self.codes.len() / self.shape[axis].max(1)).max(1);
        let blocks = Blocks {
            bits: self.bits,
            row,
            block: row,
            codes,
            scales: self.scales,
            scale_dtype: self.scale_dtype,
            zeros: self.zeros,
        };
        Placed { blocks, perm: inverse(&order), stored }
    }
}

/// The inverse of a permutation, or `None` for the identity.
fn inverse(order: &[usize]) -> Option<Vec<usize>> {
    if order.iter().enumerate().all(|(i, &d)| i == d) {
        return None;
    }
    let mut inv = vec![0; order.len()];
    for (i, &d) in order.iter().enumerate() {
        inv[d] = i;
    }
    Some(inv)
}

/// A row-major array over `shape` with its axes reordered: output axis `i` is input axis `order[i]`.
fn permute<T: Copy>(x: &[T], shape: &[usize], order: &[usize]) -> Vec<T> {
    if order.iter().enumerate().all(|(i, &d)| i == d) {
        return x.to_vec();
    }
    let cs = crate::contiguous_strides(shape);
    let out: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
    let strides: Vec<i64> = order.iter().map(|&d| cs[d] as i64).collect();
    crate::strided_indices(&out, 0, &strides).into_iter().map(|i| x[i]).collect()
}

/// The float16 encoding of `x`, rounded half to even (values beyond float16's range become infinities).
pub fn f16_bits(x: f32) -> u16 {
    let r = DType::F16.round(x, false);
    let bits = r.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = r.abs();
    if a.is_nan() {
        return sign | 0x7e00;
    }
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a == 0.0 {
        return sign;
    }
    let e = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
    if e < -14 {
        // Subnormal: a multiple of 2^-24.
        return sign | (a * 16_777_216.0) as u16;
    }
    let m = (a.to_bits() >> 13) & 0x3ff;
    sign | (((e + 15) as u16) << 10) | m as u16
}

/// The bfloat16 encoding of `x` (rounded half to even onto bfloat16's grid first).
pub fn bf16_bits(x: f32) -> u16 {
    let r = DType::BF16.round(x, false);
    if r.is_nan() {
        return 0x7fc0;
    }
    (r.to_bits() >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_encodings_decode_back() {
        let f = DType::F16.float_format().unwrap();
        for x in [0.0f32, -0.0, 1.0, -2.5, 65504.0, 6.1e-5, 5.9604645e-8, 1e-8, 70000.0, 0.1] {
            let r = DType::F16.round(x, false);
            let back = f.decode(f16_bits(x) as u32);
            assert_eq!(back.to_bits(), r.to_bits(), "{x}");
        }
        let b = DType::BF16.float_format().unwrap();
        for x in [1.0f32, -3.0e38, 1.0 + 3.0 / 256.0, 0.0] {
            assert_eq!(b.decode(bf16_bits(x) as u32), DType::BF16.round(x, false), "{x}");
        }
    }

    #[test]
    fn blocked_and_per_axis_data_is_stored_with_the_axis_last_or_first() {
        // A [3, 4] tensor in blocks of 2 along axis 0: stored [4, 3], rows of 3 in blocks of 2.
        let codes: Vec<u8> = (0..12).collect();
        let scales: Vec<f32> = (0..8).map(|s| s as f32).collect();
        let q = Quantized { shape: &[3, 4], bits: 4, codes, scales, scale_dtype: DType::F32, zeros: Zeros::All(0) };
        let p = q.blocked(0, 2);
        assert_eq!(p.stored, [4, 3]);
        assert_eq!(p.perm.as_deref(), Some(&[1, 0][..]));
        assert_eq!(p.blocks.codes[..3], [0, 4, 8]);
        // Stored row 1 (model column 1): its blocks are model scales [0][1] and [1][1].
        assert_eq!(p.blocks.scales[2..4], [1.0, 5.0]);
        // Model element (2, 1) = code 9 in block (1, 1): stored (1, 2).
        assert_eq!(p.blocks.value(3 + 2), 9.0 * 5.0);
        let q = Quantized {
            shape: &[2, 3],
            bits: 8,
            codes: vec![1, 2, 3, 4, 5, 6],
            scales: vec![10.0, 100.0, 1000.0],
            scale_dtype: DType::F32,
            zeros: Zeros::All(0),
        };
        let p = q.per_axis(1);
        assert_eq!((p.stored.clone(), p.blocks.row), (vec![3, 2], 2));
        assert_eq!(p.blocks.decode(), [10.0, 40.0, 200.0, 500.0, 3000.0, 6000.0]);
    }

    #[test]
    fn blocks_pack_as_the_layout_says() {
        let x: Vec<f32> = (0..2 * 40).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.25).collect();
        let q = Blocks::quantize(&x, 40, 16, 4, DType::F16);
        q.check().unwrap();
        assert_eq!(q.blocks_per_row(), 3);
        let l = q.layout();
        assert_eq!((l.row_words, l.scales_at, l.words), (5, 10, 13));
        let w = q.words();
        // Element 41 (row 1, k 1): word 5 + 0, nibble 1.
        assert_eq!((w[5] >> 4) & 15, q.codes[41] as u32);
        // Scale of block 4 (row 1, block 1): the low half of word 10 + 2.
        let f = DType::F16.float_format().unwrap();
        assert_eq!(f.decode(w[12] & 0xffff), q.scales[4]);
        // Within half a step, but for the opposite of a block's extreme value, clamped one step short.
        for (i, &v) in x.iter().enumerate() {
            let s = q.scales[q.block_of(i)].abs();
            assert!((q.value(i) - v).abs() <= s + 1e-6, "{i}: {} vs {v}", q.value(i));
        }
        let parts = Blocks::concat_rows(&[&q.rows_range(1, 2), &q.rows_range(0, 1)]).unwrap();
        assert_eq!(parts.codes[..40], q.codes[40..]);
        assert_eq!(parts.scales[3..], q.scales[..3]);
    }
}
