//! `mpipec data stats FILE.jsonl --processor P [--seq-len N] [--images DIR] [-o HIST.csv]`

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use mpipe::data::histogram::{self, Spread};
use mpipe::data::image::HeaderError;
use mpipe::data::processor::Processor;

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// How many problems are printed before the rest are counted.
const SHOWN: usize = 20;
/// Bytes of an image read for its header; a JPEG whose metadata is larger is read whole.
const HEAD: u64 = 64 * 1024;

pub struct Options<'a> {
    pub processor: Processor,
    pub seq_len: Option<u64>,
    pub images: Option<&'a Path>,
    pub micro_batch_size: usize,
    pub bin: u64,
    pub seed: u64,
    pub out: Option<&'a Path>,
}

/// What the samples of a dataset come to.
struct Samples {
    encoder: Vec<u64>,
    images: usize,
    llm_at_least: Vec<u64>,
}

pub fn stats(global: &Global, file: &Path, options: &Options) -> u8 {
    let mut reporter = Reporter::new(global);
    let samples = match read(file, options) {
        Ok(s) => s,
        Err((status, problems)) => {
            for p in problems.iter().take(SHOWN) {
                reporter.plain_error(p);
            }
            if problems.len() > SHOWN {
                reporter.plain_error(&format!(
                    "{}: and {} more lines with problems",
                    file.display(),
                    problems.len() - SHOWN
                ));
            }
            reporter.finish();
            return status;
        }
    };
    let microbatches = histogram::microbatches(&samples.encoder, options.micro_batch_size, options.bin, options.seed);
    let counts = histogram::histogram(&microbatches);
    print!("{}", summary(file, options, &samples, &microbatches, counts.len()));
    let Some(out) = options.out else { return 0 };
    let picture = out.with_extension("svg");
    let title = format!("{} — microbatches of {} by image tokens", file.display(), options.micro_batch_size);
    let written = std::fs::write(out, histogram::csv(&counts))
        .and_then(|()| std::fs::write(&picture, histogram::svg(&counts, &title)));
    if let Err(e) = written {
        reporter.plain_error(&format!("cannot write {}: {e}", out.display()));
        reporter.finish();
        return EXIT_USAGE;
    }
    println!("wrote {} and {}", out.display(), picture.display());
    0
}

/// Every sample's tokens, or every problem, each `FILE:LINE: what`, with the exit status.
fn read(file: &Path, options: &Options) -> Result<Samples, (u8, Vec<String>)> {
    let f =
        std::fs::File::open(file).map_err(|e| (EXIT_USAGE, vec![format!("cannot read {}: {e}", file.display())]))?;
    let folder =
        options.images.map_or_else(|| file.parent().unwrap_or(Path::new(".")).to_path_buf(), Path::to_path_buf);
    let mut sizes = Sizes::default();
    let mut samples = Samples { encoder: Vec::new(), images: 0, llm_at_least: Vec::new() };
    let mut problems = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| (EXIT_USAGE, vec![format!("cannot read {}: {e}", file.display())]))?;
        if line.trim().is_empty() {
            continue;
        }
        match sample(&line, &folder, &mut sizes, options) {
            Ok((tokens, images)) => {
                samples.encoder.push(tokens.images.encoder);
                samples.llm_at_least.push(tokens.llm_at_least);
                samples.images += images;
            }
            Err(e) => problems.push(format!("{}:{}: {e}", file.display(), i + 1)),
        }
    }
    if !problems.is_empty() {
        return Err((EXIT_INPUT, problems));
    }
    if samples.encoder.is_empty() {
        return Err((EXIT_INPUT, vec![format!("{}: no samples", file.display())]));
    }
    Ok(samples)
}

/// One line's tokens and image count.
fn sample(
    line: &str,
    folder: &Path,
    sizes: &mut Sizes,
    options: &Options,
) -> Result<(mpipe::data::SampleTokens, usize), String> {
    let record = mpipe::data::dataset::record(line)?;
    let dims = record.images.iter().map(|name| sizes.of(&folder.join(name))).collect::<Result<Vec<_>, _>>()?;
    let tokens = mpipe::data::sample_tokens(&options.processor, &record, &dims)?;
    if let Some(seq_len) = options.seq_len.filter(|n| tokens.llm_at_least > *n) {
        return Err(format!(
            "the sample is at least {} tokens ({} for its images, {} words of text), more than --seq-len {seq_len}",
            tokens.llm_at_least, tokens.images.llm, record.words
        ));
    }
    Ok((tokens, record.images.len()))
}

/// Image sizes by path, each header read once however many samples show the image.
#[derive(Default)]
struct Sizes(BTreeMap<PathBuf, Result<(u32, u32), String>>);

impl Sizes {
    fn of(&mut self, path: &Path) -> Result<(u32, u32), String> {
        self.0.entry(path.to_path_buf()).or_insert_with(|| header(path)).clone()
    }
}

/// The image's size from the first `HEAD` bytes, or from the whole file when its header runs
/// past them.
fn header(path: &Path) -> Result<(u32, u32), String> {
    let cannot = |e: std::io::Error| format!("the image `{}` cannot be read: {e}", path.display());
    let mut head = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(HEAD).read_to_end(&mut head)).map_err(cannot)?;
    let size = match mpipe::data::image::size(&head) {
        Err(HeaderError::Truncated) if head.len() as u64 == HEAD => {
            mpipe::data::image::size(&std::fs::read(path).map_err(cannot)?)
        }
        other => other,
    };
    size.map_err(|e| format!("the image `{}` has no size we can read: {e}", path.display()))
}

fn summary(file: &Path, options: &Options, samples: &Samples, microbatches: &[u64], distinct: usize) -> String {
    let row = |name: &str, s: Option<Spread>| match s {
        Some(s) => format!("  {name:<42} {:>9} {:>11.1} {:>9} {:>9} {:>9}\n", s.min, s.mean, s.p50, s.p95, s.max),
        None => format!("  {name:<42} (none: fewer samples than a microbatch)\n"),
    };
    let n = samples.encoder.len();
    let mut out = format!(
        "{}: {n} sample{}, {} image{} ({})\n  {:<42} {:>9} {:>11} {:>9} {:>9} {:>9}\n",
        file.display(),
        if n == 1 { "" } else { "s" },
        samples.images,
        if samples.images == 1 { "" } else { "s" },
        processor_name(options.processor),
        "",
        "min",
        "mean",
        "p50",
        "p95",
        "max"
    );
    out += &row("encoder tokens per sample", histogram::spread(&samples.encoder));
    out += &row("LLM tokens per sample, at least", histogram::spread(&samples.llm_at_least));
    out += &row(
        &format!("encoder tokens per sequence, by mb of {}", options.micro_batch_size),
        histogram::spread(microbatches),
    );
    out += &format!("{} microbatches, {distinct} distinct token counts\n", microbatches.len());
    out
}

pub fn processor_name(p: Processor) -> &'static str {
    match p {
        Processor::Qwen25Vl { .. } => Processor::NAMES[0],
        Processor::LlavaOnevision => Processor::NAMES[1],
        Processor::InternVl => Processor::NAMES[2],
    }
}
