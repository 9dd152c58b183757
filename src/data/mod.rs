//! data: what a training dataset asks of the encoder, for `mpipec data stats`. A dataset in the
//! LLaVA conversation format (`dataset`), its images' sizes from their headers (`image`), the
//! tokens each model family's processor makes of an image (`processor`), and the samples
//! packed into microbatches as the trainer packs them, counted into the `tokens,weight`
//! histogram a plan's `image_histogram` names (`histogram`). The caller reads the files; this
//! module gets their bytes.

pub mod dataset;
pub mod histogram;
pub mod image;
pub mod processor;

use processor::{Processor, Tokens};

/// A sample's tokens: its images' encoder and LLM tokens, and the least its LLM sequence can
/// be (those image tokens and a token per word of text; the chat template and the tokenizer
/// only add to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleTokens {
    pub images: Tokens,
    pub llm_at_least: u64,
}

/// The tokens of a sample of `record` whose images have `sizes` (width, height); an error
/// names the image the processor refuses.
pub fn sample_tokens(
    processor: &Processor,
    record: &dataset::Record,
    sizes: &[(u32, u32)],
) -> Result<SampleTokens, String> {
    let mut images = Tokens::default();
    for (name, (w, h)) in record.images.iter().zip(sizes) {
        images = images + processor.tokens(*w, *h, sizes.len()).map_err(|e| format!("the image `{name}`: {e}"))?;
    }
    Ok(SampleTokens { images, llm_at_least: images.llm + record.words })
}
