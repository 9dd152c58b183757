//! The standard library as tables, for `mpipec std`: what each definition amounts to once
//! checked, so a reader can pick hardware and models without opening `stdlib/*.mpipe`.

use crate::plan::{Arch, ArchKind, Hardware, Part, Recompute};
use crate::resolve::loader::MemoryLoader;
use crate::resolve::stdlib::MODULES;

/// A model of the standard library: its module, its definition and its size.
pub struct ModelEntry {
    pub module: &'static str,
    pub arch: Arch,
    /// Parameters of the whole architecture, embeddings and head included.
    pub params: f64,
}

impl ModelEntry {
    pub fn hidden(&self) -> u64 {
        match &self.arch.kind {
            ArchKind::Encoder(e) => e.hidden,
            ArchKind::Decoder(d) => d.hidden,
        }
    }
}

/// Every hardware definition of the standard library, with its module.
pub fn hardware() -> Vec<(&'static str, Hardware)> {
    definitions()
        .into_iter()
        .flat_map(|(module, (hardware, _))| hardware.into_iter().map(move |h| (module, h)))
        .collect()
}

/// Every encoder and decoder of the standard library.
pub fn models() -> Vec<ModelEntry> {
    let mut out = Vec::new();
    for (module, (_, archs)) in definitions() {
        for arch in archs {
            let part = Part {
                name: arch.name.clone(),
                arch: arch.clone(),
                frozen: false,
                recompute: Recompute::None,
                forward_time: None,
                backward_time: None,
                span: crate::span::Span::new(crate::span::FileId(0), 0, 0),
            };
            // Parameters do not depend on the batch: any sequence length gives the same count.
            let params = (0..arch.layers())
                .map(|i| {
                    crate::cost::layers::layer(
                        &part,
                        i,
                        1.0,
                        1.0,
                        (1.0, 1.0),
                        crate::cost::layers::Stack { flash: true, fused: true },
                    )
                    .params
                })
                .sum();
            out.push(ModelEntry { module, arch, params });
        }
    }
    out
}

/// A module of the standard library and what it defines.
type Definitions = (&'static str, (Vec<Hardware>, Vec<Arch>));

fn definitions() -> Vec<Definitions> {
    MODULES
        .iter()
        .map(|(module, name, text)| {
            let (program, _) = crate::resolve::load(name, name, text.as_bytes().to_vec(), &MemoryLoader::new());
            (*module, crate::check::definitions(&program))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_definition_of_the_standard_library_is_listed() {
        let index = crate::resolve::stdlib::index();
        let listed = super::hardware().len() + super::models().len();
        assert_eq!(listed, index.len(), "a definition of the standard library failed to check");
        let llama = super::models().into_iter().find(|m| m.arch.name == "llama3_8b").unwrap();
        // Llama 3 8B has 8.03 billion parameters (its model card).
        assert!((llama.params / 1e9 - 8.03).abs() < 0.05, "{}", llama.params);
    }
}
