//! The standard library, compiled into the binary so an installed mpipec needs no source tree.

/// `(module path, file name shown in diagnostics, text)`.
pub const MODULES: &[(&str, &str, &str)] = &[
    ("std::hardware", "<std>/hardware.mpipe", include_str!("../../stdlib/hardware.mpipe")),
    ("std::models", "<std>/models.mpipe", include_str!("../../stdlib/models.mpipe")),
];

pub fn module(path: &str) -> Option<(&'static str, &'static str)> {
    MODULES.iter().find(|(p, _, _)| *p == path).map(|(_, name, text)| (*name, *text))
}

pub fn module_names() -> impl Iterator<Item = &'static str> {
    MODULES.iter().map(|(p, _, _)| *p)
}

/// Every definition of the standard library: (module path, name, kind). Parsed once.
pub fn index() -> &'static [(&'static str, String, crate::ast::DefKind)] {
    static INDEX: std::sync::OnceLock<Vec<(&'static str, String, crate::ast::DefKind)>> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let mut out = Vec::new();
        for (path, _, text) in MODULES {
            let Ok(module) = crate::parse::parse(crate::span::FileId(0), text) else {
                continue;
            };
            for item in module.items {
                if let crate::ast::Item::Definition(d) = item {
                    out.push((*path, d.name.name, d.kind));
                }
            }
        }
        out
    })
}
