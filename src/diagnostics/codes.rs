//! The registry of diagnostic codes, rustc-style: one line per code, each with its long
//! explanation in `codes/<CODE>.md` (summary line, erroneous example, fix). Codes are never
//! reused or deleted; a retired code keeps its text and says it is no longer emitted.
//! E00xx syntax and input, E01xx imports and names, E02xx fields and types, E03xx the
//! algebra's rules, E04xx the backends, W0xxx warnings.

use serde::{Serialize, Serializer};

macro_rules! registry {
    ($($code:ident,)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code { $($code,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$code,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$code => stringify!($code),)* }
            }

            /// The long form printed by `mpipec explain`.
            pub fn explain(self) -> &'static str {
                match self { $(Code::$code => include_str!(concat!("codes/", stringify!($code), ".md")),)* }
            }
        }
    };
}

registry! {
    E0001, E0002, E0003, E0004,
    E0101, E0102, E0103, E0104, E0105, E0106, E0107, E0108, E0109, E0110,
    E0201, E0202, E0203, E0204, E0205, E0206, E0207, E0208, E0209, E0210, E0211,
    E0301, E0302, E0303, E0304, E0305, E0306, E0307, E0308, E0309, E0310, E0311, E0312,
    E0313, E0314, E0315, E0316, E0317, E0318, E0319, E0320, E0321, E0322, E0323,
    E0401, E0402,
    W0001, W0002, W0003, W0004, W0005, W0006,
}

impl Code {
    pub fn parse(text: &str) -> Option<Code> {
        let upper = text.trim().to_ascii_uppercase();
        Code::ALL.iter().copied().find(|c| c.as_str() == upper)
    }

    pub fn is_warning(self) -> bool {
        self.as_str().starts_with('W')
    }

    /// The first line of the explanation (`# E0001: summary`): what the code means.
    pub fn summary(self) -> &'static str {
        let first = self.explain().lines().next().unwrap_or("");
        first.split_once(": ").map_or(first, |(_, summary)| summary)
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
