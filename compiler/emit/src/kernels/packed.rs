//! One-row products over narrow weights as stored (float16, 4- and 8-bit blocks, K-major): the decoding of a
//! unit of B ([`PackedGemv`]) and the template of templates/gemv_packed.wgsl, whose layout
//! [`wgslc_passes::packed_gemv_tiling`] chooses and `Emitter::matmul` fills in.

use super::*;
use wgslc_passes::Narrow;

/// A one-row product over a narrow K-major B read a unit of `unit_words` 32-bit words at a time (one vec4, vec2
/// or u32 load): each unit's elements are decoded against as many of A, read from workgroup memory as vec4s; a
/// block-quantized unit's words are taken a block at a time (one scale and zero point each).
pub(super) struct PackedGemv {
    pub(super) per_word: usize,
    /// Words per stored row (one output's weights), and units.
    pub(super) row_words: usize,
    pub(super) row_units: usize,
    pub(super) unit_words: usize,
    /// log2(`unit_words`) and `unit_words - 1`: word `i` is component `i & unit_mask` of unit `i >> unit_shift`.
    pub(super) unit_shift: u32,
    pub(super) unit_mask: usize,
    pub(super) unit_elems: usize,
    /// vec4s of A under a unit, as indices.
    pub(super) unit_vecs: usize,
    pub(super) a_vecs: Vec<usize>,
    /// The WGSL type B's bindings are declared as: `vec4<u32>`, `vec2<u32>` or `u32`.
    pub(super) unit_ty: &'static str,
    /// Statements that take the unit `wv` apart into words (`w0`, …) or float16 pairs (`h0`, …).
    pub(super) decode: Vec<String>,
    /// Every element of a unit: the product term it adds to its group's dot product.
    pub(super) elems: Vec<PackedElem>,
    /// The unit's words by block (one group when float16).
    pub(super) groups: Vec<PackedGroup>,
    /// Float16 or bfloat16 pairs (`None`: block-quantized codes).
    pub(super) half: Option<&'static str>,
    pub(super) code_mask: u32,
    /// Words of codes per block.
    pub(super) words_per_block: usize,
    pub(super) blocks_per_row: usize,
    pub(super) scales_at: usize,
    pub(super) scale_f16: bool,
    /// Where the zero points are (word, shift and lane mask for a block index), or the one zero point.
    pub(super) zeros_at: Option<usize>,
    pub(super) zero: String,
    pub(super) bits: u32,
    /// Each element of a word's factor as A is staged (` * 2^-s`, or empty), for the in-place codes.
    pub(super) a_scales: Vec<String>,
    pub(super) word_shift: u32,
    pub(super) lane_mask: u32,
}

/// One element of a unit: `dot{g} = fma(av{q}.{comp}, b, dot{g})`.
pub(super) struct PackedElem {
    pub(super) g: usize,
    pub(super) q: usize,
    pub(super) comp: char,
    pub(super) b: String,
}

/// Words of a unit in one block.
pub(super) struct PackedGroup {
    pub(super) g: usize,
    pub(super) first_word: usize,
    pub(super) words: Vec<usize>,
}

impl PackedGemv {
    /// The unit-at-a-time read of B for a K-major one-row product over `k` = B's row length, when every block of
    /// B is narrow in a layout that allows it: float16/bfloat16 pairs, or codes whose rows fill whole words with no
    /// word across two blocks; and B's columns are its stored rows (`b_sn` = `k`).
    pub(super) fn new(narrow: &[Option<Narrow>], k: usize, b_sn: i64) -> Option<PackedGemv> {
        let first = (*narrow.first()?)?;
        if narrow.iter().any(|n| *n != Some(first)) || b_sn != k as i64 {
            return None;
        }
        let (per_word, row_words, half, bits) = match first {
            Narrow::Half(d) => {
                if !k.is_multiple_of(2) {
                    return None;
                }
                (2, k / 2, Some(if d == wgslc_ir::DType::BF16 { "bf16" } else { "f16" }), 16)
            }
            Narrow::Blocks(l) => {
                let per_word = 32 / l.bits as usize;
                if l.row != k || l.row_words * per_word != l.row || l.block % per_word != 0 {
                    return None;
                }
                (per_word, l.row_words, None, l.bits)
            }
        };
        // The widest unit that divides a row and covers whole vec4s of A.
        let unit_words = [4usize, 2, 1].into_iter().find(|&u| row_words % u == 0 && (u * per_word) % 4 == 0)?;
        let unit_elems = unit_words * per_word;
        let word =
            |j: usize| if unit_words == 1 { "wv".to_string() } else { format!("wv.{}", ['x', 'y', 'z', 'w'][j]) };
        let words_per_block = match first {
            Narrow::Blocks(l) => l.block / per_word,
            Narrow::Half(_) => unit_words,
        };
        let group_words = unit_words.min(words_per_block);
        let groups: Vec<PackedGroup> = (0..unit_words / group_words)
            .map(|g| PackedGroup {
                g,
                first_word: g * group_words,
                words: (g * group_words..(g + 1) * group_words).collect(),
            })
            .collect();
        let decode = (0..unit_words)
            .map(|j| match half {
                Some("f16") => format!("let h{j} = unpack2x16float({});", word(j)),
                Some(_) => {
                    format!("let h{j} = bitcast<vec2<f32>>(vec2<u32>({w} << 16u, {w} & 0xffff0000u));", w = word(j))
                }
                // A word's codes read in place from its two halves (the upper one shifted down once).
                None => format!("let w{j} = {};\n                let v{j} = w{j} >> 16u;", word(j)),
            })
            .collect();
        let per_half = 16 / bits as usize;
        let elems = (0..unit_elems)
            .map(|e| {
                let (j, l) = (e / per_word, e % per_word);
                let b = match half {
                    Some(_) => format!("h{j}.{}", ['x', 'y'][l]),
                    // The code c as a float without an integer conversion (a quarter-rate or slower instruction
                    // on GPUs, one per weight) nor a shift: masked in place in its half of the word, it is
                    // c · 2^s (s = its bit offset in the half, below 16), and 2^23 + c · 2^s has it as mantissa
                    // bits, so the subtraction is exact; A's element was staged times 2^-s ([`Self::a_scales`]),
                    // so the product is c · A's element, as exact as with c itself.
                    None => format!(
                        "(bitcast<f32>(({}{j} & {}u) | 0x4b000000u) - 8388608.0)",
                        if l < per_half { 'w' } else { 'v' },
                        ((1u32 << bits) - 1) << ((l % per_half) as u32 * bits),
                    ),
                };
                PackedElem { g: j / group_words, q: e / 4, comp: ['x', 'y', 'z', 'w'][e % 4], b }
            })
            .collect();
        let mut p = PackedGemv {
            a_scales: (0..per_word)
                .map(|l| match (half, (l % per_half) as u32 * bits) {
                    (None, s) if s > 0 => format!(" * {}", f32_lit(1.0 / (1u32 << s) as f32)),
                    _ => String::new(),
                })
                .collect(),
            per_word,
            row_words,
            row_units: row_words / unit_words,
            unit_words,
            unit_shift: unit_words.trailing_zeros(),
            unit_mask: unit_words - 1,
            unit_elems,
            unit_vecs: unit_elems / 4,
            a_vecs: (0..unit_elems / 4).collect(),
            unit_ty: match unit_words {
                4 => "vec4<u32>",
                2 => "vec2<u32>",
                _ => "u32",
            },
            decode,
            elems,
            groups,
            half,
            code_mask: 0,
            words_per_block,
            blocks_per_row: 0,
            scales_at: 0,
            scale_f16: false,
            zeros_at: None,
            zero: String::new(),
            bits,
            word_shift: 0,
            lane_mask: 0,
        };
        if let Narrow::Blocks(l) = first {
            p.code_mask = (1 << l.bits) - 1;
            p.blocks_per_row = l.blocks_per_row;
            p.scales_at = l.scales_at;
            p.scale_f16 = l.scale_f16;
            (p.zeros_at, p.zero) = match l.zeros {
                wgslc_ir::ZeroLayout::All(z) => (None, f32_lit(z as f32)),
                wgslc_ir::ZeroLayout::At(at) => (Some(at), String::new()),
            };
            p.word_shift = (per_word as u32).trailing_zeros();
            p.lane_mask = per_word as u32 - 1;
        }
        Some(p)
    }
}

/// A one-row product over a narrow K-major B ([`PackedGemv`], templates/gemv_packed.wgsl): A staged in workgroup
/// memory, each group of lanes over `t.per_group` columns.
#[derive(Template)]
#[template(path = "gemv_packed.wgsl", escape = "none")]
pub(super) struct GemvPackedTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) operand: Option<Fused>,
    pub(super) a_off: i64,
    pub(super) a_sk: usize,
    pub(super) a_ld: Ld,
    pub(super) a_pro: String,
    /// The folded RMSNormalization (its weights applied to A as it is staged).
    pub(super) rms: Option<RmsFold>,
    pub(super) p: PackedGemv,
    pub(super) t: wgslc_passes::PackedGemvTiling,
    pub(super) half_lanes: usize,
    /// Partial sums a column has left after the lanes' pairwise sums, added up by lane 0 ([`tree_tail`]).
    pub(super) tail: usize,
    /// A's elements staged at a time (a multiple of `p.unit_elems`), as vec4s, and their words.
    pub(super) kc: usize,
    pub(super) kc_vecs: usize,
    pub(super) kc_words: usize,
    /// Units of B a chunk of A covers: workgroup memory holds vec4 `q` of every unit side by side (vec4 `q` of
    /// unit `u` at `q · a_units + u`, and word `w` of unit `u`'s sum at `w · a_units + u`), so that lanes reading
    /// neighbouring units read neighbouring vec4s (one bank each) rather than vec4s a unit apart (one bank).
    pub(super) a_units: usize,
    pub(super) sums_len: usize,
    /// The group's columns, each with its partial sums' place in workgroup memory.
    pub(super) cs: Vec<PackedCol>,
    /// A lane's units of a chunk: unit `lane + off` of each.
    pub(super) iters: Vec<PackedIter>,
    /// A thread's elements of a chunk of A by word, held in registers between their load and their staging.
    pub(super) stage_words: Vec<PackedStageWord>,
    /// Where a chunk's loads are written: before the chunk loop (chunk 0), and in it (the next chunk, while this
    /// one is summed) where there is more than one chunk.
    pub(super) loads: Vec<PackedLoads>,
    pub(super) arms: Vec<GemvArm>,
    pub(super) blocks: Vec<String>,
    pub(super) per: usize,
    pub(super) n: usize,
    pub(super) n_last: usize,
    pub(super) k: usize,
    pub(super) alpha: String,
    pub(super) beta: String,
    pub(super) has_bias: bool,
    pub(super) bias_ld: Ld,
    pub(super) bias_sn: usize,
    /// The subgroup form ([`super::EmittedKernel::subgroups`]), and whether a group's lanes may span subgroups
    /// (more lanes than the smallest subgroup WebGPU allows).
    pub(super) sg: bool,
    pub(super) wide_groups: bool,
}

impl GemvPackedTpl {
    /// The current tile's first column of the group: `tcol0` in the tile loop, else `col0`.
    fn tile_col0(&self) -> &'static str {
        if self.t.tiles > 1 {
            "tcol0"
        } else {
            "col0"
        }
    }
}

pub(super) struct PackedCol {
    pub(super) c: usize,
    pub(super) base: usize,
}

/// Element `j` of its [`PackedStageWord`], held in register `as{i}`.
pub(super) struct PackedSlot {
    pub(super) i: usize,
    pub(super) j: usize,
}

/// Word `tid + word_off` of a chunk of A: the elements a thread loads and stages.
pub(super) struct PackedStageWord {
    pub(super) word_off: usize,
    pub(super) slots: Vec<PackedSlot>,
}

/// One place a chunk's loads are written: the chunk's first element `k0`, inside `open` … `close`; B's, and A's
/// elements to stage where `stage_a` (a next tile's loads read B alone: A is staged once).
pub(super) struct PackedLoads {
    pub(super) k0: String,
    pub(super) open: String,
    pub(super) close: String,
    pub(super) stage_a: bool,
}

pub(super) struct PackedIter {
    pub(super) i: usize,
    pub(super) off: usize,
}

/// A's elements a packed matrix-vector kernel stages in workgroup memory at a time (8 KiB).
pub(super) const PACKED_A_CHUNK: usize = 2048;
