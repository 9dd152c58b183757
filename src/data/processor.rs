//! How many tokens an image of a given size becomes, by each model family's image processor in
//! Hugging Face transformers (read at v5.24, the version the project's torch environment pins):
//! the encoder's tokens (the vision tower's sequence, what a plan's `image_tokens` counts) and
//! the LLM's (the placeholder tokens the processor writes into the text, which `seq_len`
//! counts). Each rule cites the function it follows; the constants are the published
//! checkpoints' preprocessor configurations, where those differ from the classes' defaults.

/// A model family's image processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processor {
    /// Qwen2.5-VL: resized to multiples of 28 px within a pixel budget, 14-px patches, 2×2
    /// merged into one LLM token.
    Qwen25Vl { min_pixels: u64, max_pixels: u64 },
    /// LLaVA-OneVision's anyres: a 384-px base view and 384-px tiles of the best grid, SigLIP's
    /// 27×27 patches each.
    LlavaOnevision,
    /// InternVL: up to 12 448-px tiles in the grid nearest the image's aspect ratio, and a
    /// thumbnail when there is more than one; InternViT's 32×32 patches each.
    InternVl,
}

/// The tokens of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Tokens {
    /// The vision tower's sequence: patches before any merge.
    pub encoder: u64,
    /// Placeholder tokens in the LLM's sequence.
    pub llm: u64,
}

impl std::ops::Add for Tokens {
    type Output = Tokens;
    fn add(self, other: Tokens) -> Tokens {
        Tokens { encoder: self.encoder + other.encoder, llm: self.llm + other.llm }
    }
}

/// Qwen2.5-VL checkpoints' `preprocessor_config.json` (Qwen/Qwen2.5-VL-*-Instruct):
/// `min_pixels` 3136 = 56², `max_pixels` 12845056 = 16384·28², so an image is 4 to 16,384 LLM
/// tokens. (`Qwen2VLImageProcessor`'s own default `longest_edge` is 28·28·1280; the checkpoints
/// override it.)
pub const QWEN_MIN_PIXELS: u64 = 3136;
pub const QWEN_MAX_PIXELS: u64 = 12_845_056;

/// `Qwen2VLImageProcessor.patch_size` and `merge_size`.
const QWEN_PATCH: u64 = 14;
const QWEN_MERGE: u64 = 2;
/// `smart_resize` refuses images more elongated than this.
const QWEN_MAX_RATIO: f64 = 200.0;

/// LLaVA-OneVision: `LlavaOnevisionImageProcessor.size` 384 (the tile and the base view),
/// `LlavaOnevisionConfig`'s SigLIP `image_size` 384 and `patch_size` 14: 27² = 729 features a
/// view (`num_image_tokens` of the checkpoints' processor config; SigLIP has no class token,
/// and `vision_feature_select_strategy` is "full"). `vision_aspect_ratio` "anyres_max_9".
const LLAVA_TILE: u64 = 384;
const LLAVA_SIDE: u64 = 27;
const LLAVA_MAX_TILES: f64 = 9.0;
/// `image_grid_pinpoints`: every (height, width) of 1 to 6 tiles a side.
const LLAVA_GRID: u64 = 6;

/// InternVL: `InternVLVisionConfig.image_size` 448 and `patch_size` 14 (32² patches a tile);
/// `GotOcr2ImageProcessor`'s `min_patches` 1 and `max_patches` 12 with `crop_to_patches`, which
/// `InternVLProcessor` turns on; `image_seq_length` 256 (the pixel shuffle's 0.5² of 1024) and
/// the `<img>` `</img>` pair around each image (`InternVLProcessor._get_num_multimodal_tokens`).
const INTERN_TILE: u64 = 448;
const INTERN_PATCH: u64 = 14;
const INTERN_MIN_TILES: u64 = 1;
const INTERN_MAX_TILES: u64 = 12;
const INTERN_LLM_PER_TILE: u64 = 256;
const INTERN_DELIMITERS: u64 = 2;

impl Processor {
    pub const NAMES: [&'static str; 3] = ["qwen2_5_vl", "llava", "internvl"];

    /// One image of `width` × `height` pixels, in a sample of `images` images.
    pub fn tokens(&self, width: u32, height: u32, images: usize) -> Result<Tokens, String> {
        let (w, h) = (u64::from(width), u64::from(height));
        match *self {
            Processor::Qwen25Vl { min_pixels, max_pixels } => qwen(w, h, min_pixels, max_pixels),
            Processor::LlavaOnevision => Ok(llava_onevision(w, h, images)),
            Processor::InternVl => Ok(internvl(w, h)),
        }
    }
}

/// `Qwen2VLImageProcessor.get_number_of_image_patches`: `smart_resize` to multiples of
/// `patch_size · merge_size`, then one encoder token per 14-px patch (an image is one temporal
/// patch) and one LLM token per `merge_size²` of them (`Qwen2_5_VLProcessor`).
fn qwen(w: u64, h: u64, min_pixels: u64, max_pixels: u64) -> Result<Tokens, String> {
    let ratio = w.max(h) as f64 / w.min(h) as f64;
    if ratio > QWEN_MAX_RATIO {
        return Err(format!(
            "its aspect ratio is {ratio:.0}:1; Qwen2.5-VL's processor refuses images above {QWEN_MAX_RATIO:.0}:1"
        ));
    }
    let (rh, rw) = smart_resize(h, w, QWEN_PATCH * QWEN_MERGE, min_pixels, max_pixels);
    let encoder = (rh / QWEN_PATCH) * (rw / QWEN_PATCH);
    Ok(Tokens { encoder, llm: encoder / (QWEN_MERGE * QWEN_MERGE) })
}

/// `transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize`: each side rounded to
/// a multiple of `factor` (Python's `round`, halves to even), then scaled down or up by one
/// factor for both sides when the area leaves `[min_pixels, max_pixels]`.
fn smart_resize(h: u64, w: u64, factor: u64, min_pixels: u64, max_pixels: u64) -> (u64, u64) {
    let f = factor as f64;
    let (hf, wf) = (h as f64, w as f64);
    let mut h_bar = (hf / f).round_ties_even() as u64 * factor;
    let mut w_bar = (wf / f).round_ties_even() as u64 * factor;
    if h_bar * w_bar > max_pixels {
        let beta = ((h * w) as f64 / max_pixels as f64).sqrt();
        h_bar = factor.max((hf / beta / f).floor() as u64 * factor);
        w_bar = factor.max((wf / beta / f).floor() as u64 * factor);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / (h * w) as f64).sqrt();
        h_bar = (hf * beta / f).ceil() as u64 * factor;
        w_bar = (wf * beta / f).ceil() as u64 * factor;
    }
    (h_bar, w_bar)
}

/// LLaVA-OneVision. Encoder: `LlavaOnevisionModel.get_image_features` runs the tower on the base
/// view and every tile of the grid `select_best_resolution` picks
/// (`image_size_to_num_patches`), but only on the base view when the sample has several images
/// (`need_patching = n == 1`). LLM: `LlavaOnevisionProcessor._get_number_of_features` (the
/// unpadded grid's features, a newline per row, pooled down when above `anyres_max_9`, plus the
/// base view), or a view and its newline for an image among several.
fn llava_onevision(w: u64, h: u64, images: usize) -> Tokens {
    let view = LLAVA_SIDE * LLAVA_SIDE;
    if images != 1 {
        return Tokens { encoder: view, llm: view + 1 };
    }
    let (bh, bw) = select_best_resolution(h, w);
    let (sh, sw) = (bh / LLAVA_TILE, bw / LLAVA_TILE);
    let (unpadded, newlines) = unpadded_features(h, w, sh, sw);
    Tokens { encoder: (sh * sw + 1) * view, llm: unpadded + newlines + view }
}

/// `transformers.image_processing_utils.select_best_resolution` over LLaVA-OneVision's
/// `image_grid_pinpoints`: the (height, width) that keeps the most of the image's resolution
/// when it is scaled to fit, then wastes the least; the first such in the list's order.
fn select_best_resolution(h: u64, w: u64) -> (u64, u64) {
    let mut best = (LLAVA_TILE, LLAVA_TILE);
    let (mut most_effective, mut least_wasted) = (0u64, u64::MAX);
    for rows in 1..=LLAVA_GRID {
        for cols in 1..=LLAVA_GRID {
            let (ph, pw) = (rows * LLAVA_TILE, cols * LLAVA_TILE);
            let scale = (pw as f64 / w as f64).min(ph as f64 / h as f64);
            let (dw, dh) = ((w as f64 * scale) as u64, (h as f64 * scale) as u64);
            let effective = (dw * dh).min(w * h);
            let wasted = (pw * ph).saturating_sub(effective);
            if effective > most_effective || (effective == most_effective && wasted < least_wasted) {
                (most_effective, least_wasted, best) = (effective, wasted, (ph, pw));
            }
        }
    }
    best
}

/// `LlavaOnevisionProcessor._get_unpadded_features`: the grid's features without the rows or
/// columns that padding to the grid's aspect ratio added, and a newline per row; above
/// `anyres_max_9` tiles' worth both shrink by the square root of the excess (the model's
/// bilinear pooling).
fn unpadded_features(h: u64, w: u64, sh: u64, sw: u64) -> (u64, u64) {
    let (mut ch, mut cw) = ((LLAVA_SIDE * sh) as i64, (LLAVA_SIDE * sw) as i64);
    let (hf, wf) = (h as f64, w as f64);
    if wf / hf > cw as f64 / ch as f64 {
        let new_h = round7(hf * (cw as f64 / wf)) as i64;
        ch -= 2 * (ch - new_h).div_euclid(2);
    } else {
        let new_w = round7(wf * (ch as f64 / hf)) as i64;
        cw -= 2 * (cw - new_w).div_euclid(2);
    }
    let (ch, cw) = (ch as f64, cw as f64);
    let ratio = (ch * cw / (LLAVA_MAX_TILES * (LLAVA_SIDE * LLAVA_SIDE) as f64)).sqrt();
    if ratio > 1.1 {
        let (rh, rw) = ((ch / ratio).floor(), (cw / ratio).floor());
        return ((rh * rw) as u64, rh as u64);
    }
    ((ch * cw) as u64, ch as u64)
}

/// Python's `int(round(x, 7))`: rounded at the seventh decimal (so that 26.99999999 from a
/// float product counts as 27), then truncated.
fn round7(x: f64) -> f64 {
    ((x * 1e7).round() / 1e7).trunc()
}

/// InternVL, through `GotOcr2ImageProcessor.get_number_of_image_patches`: the tiles of
/// `get_optimal_tiled_canvas`, plus the thumbnail when there is more than one.
fn internvl(w: u64, h: u64) -> Tokens {
    let (cols, rows) = optimal_tiled_canvas(h, w);
    let tiles = if cols * rows > 1 { cols * rows + 1 } else { 1 };
    let per_tile = (INTERN_TILE / INTERN_PATCH).pow(2);
    Tokens { encoder: tiles * per_tile, llm: tiles * INTERN_LLM_PER_TILE + INTERN_DELIMITERS }
}

/// `get_optimal_tiled_canvas`: among (columns, rows) with `min_patches` to `max_patches` tiles,
/// ordered by tile count (`get_all_supported_aspect_ratios`, a stable sort), the nearest aspect
/// ratio; on a tie the later grid wins while the image covers more than half of it.
fn optimal_tiled_canvas(h: u64, w: u64) -> (u64, u64) {
    let mut grids: Vec<(u64, u64)> = (1..=INTERN_MAX_TILES)
        .flat_map(|c| (1..=INTERN_MAX_TILES).map(move |r| (c, r)))
        .filter(|(c, r)| (INTERN_MIN_TILES..=INTERN_MAX_TILES).contains(&(c * r)))
        .collect();
    grids.sort_by_key(|(c, r)| c * r);
    let aspect = w as f64 / h as f64;
    let area = (w * h) as f64;
    let tile_area = (INTERN_TILE * INTERN_TILE) as f64;
    let (mut best, mut best_diff) = ((1, 1), f64::INFINITY);
    for (c, r) in grids {
        let diff = (aspect - c as f64 / r as f64).abs();
        if diff < best_diff {
            (best, best_diff) = ((c, r), diff);
        } else if diff == best_diff && area > 0.5 * tile_area * (c * r) as f64 {
            best = (c, r);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (width, height) of the sizes every rule is tested at: common photos, the smallest, very
    /// elongated ones, and ones past every pixel budget.
    const SIZES: [(u32, u32); 9] = [
        (640, 480),
        (1920, 1080),
        (28, 28),
        (100, 3000),
        (4000, 3000),
        (333, 777),
        (50, 60),
        (1200, 400),
        (10000, 7000),
    ];

    /// Expected values are what transformers 5.24 itself computes for these sizes, run in the
    /// project's torch environment: `smart_resize(h, w, 28, 3136, 12845056)` then
    /// `(h // 14) * (w // 14)`.
    #[test]
    fn qwen_matches_smart_resize() {
        let encoder = [1564, 10764, 16, 1712, 61204, 1344, 16, 2408, 65056];
        let p = Processor::Qwen25Vl { min_pixels: QWEN_MIN_PIXELS, max_pixels: QWEN_MAX_PIXELS };
        for ((w, h), e) in SIZES.into_iter().zip(encoder) {
            assert_eq!(p.tokens(w, h, 1), Ok(Tokens { encoder: e, llm: e / 4 }), "{w}x{h}");
        }
        assert!(p.tokens(201, 1, 1).unwrap_err().contains("201:1"));
    }

    /// `select_best_resolution((h, w), LlavaOnevisionImageProcessorPil.image_grid_pinpoints)`
    /// for the encoder's views, and `LlavaOnevisionProcessor._get_number_of_features(h, w, 384,
    /// 384)` with 729 tokens a view and "anyres_max_9" for the LLM's, from transformers 5.24.
    #[test]
    fn llava_onevision_matches_anyres() {
        let expected = [
            (3645, 2929),
            (11664, 7269),
            (1458, 1485),
            (5103, 1701),
            (22599, 7309),
            (2916, 2493),
            (1458, 1377),
            (6561, 4653),
            (22599, 7228),
        ];
        for ((w, h), (encoder, llm)) in SIZES.into_iter().zip(expected) {
            assert_eq!(Processor::LlavaOnevision.tokens(w, h, 1), Ok(Tokens { encoder, llm }), "{w}x{h}");
        }
        assert_eq!(Processor::LlavaOnevision.tokens(4000, 3000, 2), Ok(Tokens { encoder: 729, llm: 730 }));
    }

    /// `get_optimal_tiled_canvas((h, w), (448, 448), 1, 12)` from transformers 5.24's
    /// GotOcr2 processor, a thumbnail added past one tile, 1024 encoder and 256 LLM tokens a
    /// tile and 2 delimiters.
    #[test]
    fn internvl_matches_the_tiled_canvas() {
        let tiles = [13, 9, 1, 13, 13, 11, 13, 4, 7];
        for ((w, h), t) in SIZES.into_iter().zip(tiles) {
            assert_eq!(
                Processor::InternVl.tokens(w, h, 1),
                Ok(Tokens { encoder: t * 1024, llm: t * 256 + 2 }),
                "{w}x{h}"
            );
        }
    }
}
